# shellcheck shell=sh
# A three-host network on one machine, for tests/test_multihost.sh and
# `make run-cluster` (sourced by both; POSIX sh, needs root): network
# namespaces ps-0, ps-1 and the workers' host, each with its own address
# on one bridge (which lives in a fourth namespace, so the machine's own
# network is never touched), and host names: in each namespace
# `ip netns exec` shows /etc/netns/NS/hosts as /etc/hosts, naming
# ps-0 = 10.200.0.1, ps-1 = 10.200.0.2 and workers = 10.200.0.3.
#
# netns_up TAG: makes the namespaces psd-TAG-{0,1,w,br} (TAG should hold
#   the caller's PID, so parallel runs never clash) and sets NS_0, NS_1,
#   NS_W, NS_BR. Returns 1 with the reason in NETNS_WHY when namespaces
#   cannot be made (not root, no CAP_SYS_ADMIN, no veth or bridge).
# netns_down: kills whatever runs in them and deletes them and their
#   /etc/netns folders; safe to call twice and after a partial netns_up.
# in_ns NS CMD...: runs CMD in namespace NS.

# Run by itself it would define functions and end: say what to run.
case ${0##*/} in
netns.sh)
    echo "examples/netns.sh: helpers sourced by make run-cluster (or examples/run_cluster.sh BUILD_DIR) and tests/test_multihost.sh; run one of those" >&2
    exit 2 ;;
esac

IP=$(command -v ip 2>/dev/null || echo /usr/sbin/ip)
NETNS_ADDR_0=10.200.0.1
NETNS_ADDR_1=10.200.0.2
NETNS_ADDR_W=10.200.0.3
NETNS_ALL=""
NETNS_WHY=""
NETNS_MADE_ETC=""

in_ns() {
    ns=$1
    shift
    "$IP" netns exec "$ns" "$@"
}

netns_down() {
    for ns in $NETNS_ALL; do
        pids=$("$IP" netns pids "$ns" 2>/dev/null)
        # shellcheck disable=SC2086
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    done
    for ns in $NETNS_ALL; do
        "$IP" netns del "$ns" 2>/dev/null
        rm -rf "/etc/netns/$ns"
    done
    # /etc/netns itself when netns_up made it (and nothing else is in it).
    [ -n "$NETNS_MADE_ETC" ] && rmdir /etc/netns 2>/dev/null
    NETNS_ALL=""
}

# netns_join NS ADDR PEER: a veth from NS (eth0, ADDR/24) to the bridge.
netns_join() {
    "$IP" -n "$1" link add eth0 type veth peer name "$3" netns "$NS_BR" &&
        "$IP" -n "$NS_BR" link set "$3" master br0 up &&
        "$IP" -n "$1" addr add "$2/24" dev eth0 &&
        "$IP" -n "$1" link set eth0 up &&
        "$IP" -n "$1" link set lo up
}

netns_up() {
    if [ "$(id -u)" != 0 ]; then
        NETNS_WHY="network namespaces need root (running as uid $(id -u))"
        return 1
    fi
    if [ ! -x "$IP" ]; then
        NETNS_WHY="no ip command (iproute2)"
        return 1
    fi
    NS_0="psd-$1-0" NS_1="psd-$1-1" NS_W="psd-$1-w" NS_BR="psd-$1-br"
    for ns in "$NS_BR" "$NS_0" "$NS_1" "$NS_W"; do
        if ! err=$("$IP" netns add "$ns" 2>&1); then
            NETNS_WHY="ip netns add $ns: $err"
            netns_down
            return 1
        fi
        NETNS_ALL="$NETNS_ALL $ns"
    done
    if ! err=$( { "$IP" -n "$NS_BR" link add br0 type bridge &&
                  "$IP" -n "$NS_BR" link set br0 up &&
                  netns_join "$NS_0" "$NETNS_ADDR_0" p0 &&
                  netns_join "$NS_1" "$NETNS_ADDR_1" p1 &&
                  netns_join "$NS_W" "$NETNS_ADDR_W" pw; } 2>&1); then
        NETNS_WHY="cannot wire the namespaces: $err"
        netns_down
        return 1
    fi
    [ -d /etc/netns ] || NETNS_MADE_ETC=1
    for ns in "$NS_0" "$NS_1" "$NS_W"; do
        mkdir -p "/etc/netns/$ns" &&
        printf '127.0.0.1 localhost\n%s ps-0\n%s ps-1\n%s workers\n' \
            "$NETNS_ADDR_0" "$NETNS_ADDR_1" "$NETNS_ADDR_W" \
            >"/etc/netns/$ns/hosts"
    done
    # The bridge learns the ports before the first test packet needs
    # them; a ping per host proves the wiring.
    for a in "$NETNS_ADDR_0" "$NETNS_ADDR_1"; do
        if ! in_ns "$NS_W" ping -c 1 -W 2 "$a" >/dev/null 2>&1 &&
           command -v ping >/dev/null 2>&1; then
            NETNS_WHY="the workers' namespace cannot reach $a"
            netns_down
            return 1
        fi
    done
    return 0
}
