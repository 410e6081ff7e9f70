#!/bin/sh
# `make run-cluster`: the Fashion-MNIST demo across three hosts made of
# network namespaces on one machine (examples/netns.sh; needs root): psd
# node 0 on host ps-0, node 1 on ps-1, both listening on 0.0.0.0 and
# requiring a token (a fresh random one in a private file), and 4
# asynchronous workers plus the evaluation on a third host, reaching the
# nodes by name. Prints where each process runs and the final accuracy.
# Usage: run_cluster.sh BUILD_DIR
set -u

BUILD=${1:?usage: run_cluster.sh BUILD_DIR}
WORKERS=4
MIN_ACC=0.80
PROG=run_cluster
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$BUILD" && pwd)
# shellcheck source=examples/netns.sh
. "$top/examples/netns.sh"

say() { printf '%s: %s\n' "$PROG" "$*"; }
fail() { printf '%s: FAIL: %s\n' "$PROG" "$*" >&2; exit 1; }

TMP=""
PSDS=""
cleanup() {
    rc=$?
    trap - EXIT
    # shellcheck disable=SC2086
    [ -n "$PSDS" ] && kill -TERM $PSDS 2>/dev/null && sleep 1
    netns_down
    [ -n "$TMP" ] && rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# A closed terminal or a dropped ssh session: psd takes SIGHUP for a
# reload and would run on, so the script cleans up as for Ctrl-C.
trap 'exit 129' HUP

[ -x "$build/psd" ] && [ -x "$build/fashion_softmax" ] ||
    fail "$build/psd or fashion_softmax missing; run make first"
TMP=$(mktemp -d /tmp/psd-run-cluster-XXXXXX) || fail "no temporary folder"
netns_up "rc$$" || fail "cannot build the network: $NETNS_WHY"

head -c 32 /dev/urandom | base64 >"$TMP/token"
chmod 600 "$TMP/token"
sed -e '/^nodes/d' -e '/^workers/d' -e '/^data_dir/d' "$top/conf/cluster-2.ini" |
    awk -v tmp="$TMP" -v w="$WORKERS" '
        { print }
        /^\[cluster\]/ { print "nodes   = ps-0:7070, ps-1:7071"
                         print "listen  = 0.0.0.0:7070, 0.0.0.0:7071"
                         print "workers = " w }
        /^\[server\]/  { print "data_dir = " tmp
                         print "auth_token_file = " tmp "/token" }' \
    >"$TMP/cluster.ini"

say "host ps-0 = netns $NS_0 ($NETNS_ADDR_0): psd node 0"
say "host ps-1 = netns $NS_1 ($NETNS_ADDR_1): psd node 1"
say "host workers = netns $NS_W ($NETNS_ADDR_W): $WORKERS workers and the" \
    "evaluation"
say "token: a random one in $TMP/token (mode 600); traffic is not encrypted"

for i in 0 1; do
    ns=$NS_0
    [ "$i" = 1 ] && ns=$NS_1
    in_ns "$ns" "$build/psd" --check -c "$TMP/cluster.ini" -n "$i" ||
        fail "psd --check failed for node $i"
    "$IP" netns exec "$ns" "$build/psd" -c "$TMP/cluster.ini" -n "$i" \
        >"$BUILD/psd-cluster-node$i.log" 2>&1 &
    PSDS="$PSDS $!"
done
up=0
for i in $(seq 1 100); do
    up=$(cat "$BUILD"/psd-cluster-node*.log | grep -c 'listening on')
    [ "$up" = 2 ] && break
    sleep 0.1
done
grep -h "listening on" "$BUILD"/psd-cluster-node*.log | sed 's/^/    /'
# Workers started against nodes that are not there would only fail later,
# each through its own timeout, far from the cause.
[ "$up" = 2 ] || {
    for i in 0 1; do
        printf '%s: node %d log:\n' "$PROG" "$i" >&2
        sed 's/^/    /' "$BUILD/psd-cluster-node$i.log" >&2
    done
    fail "the nodes did not both listen within 10 s (logs above)"
}

pids=""
w=0
while [ "$w" -lt "$WORKERS" ]; do
    "$IP" netns exec "$NS_W" "$build/fashion_softmax" --servers \
        "$TMP/cluster.ini" --worker "$w" --workers "$WORKERS" \
        >"$BUILD/cluster-worker$w.log" 2>&1 &
    pids="$pids $!"
    say "worker $w: pid $! on host workers, log $BUILD/cluster-worker$w.log"
    w=$((w + 1))
done
failed=0
for p in $pids; do wait "$p" || failed=1; done
[ "$failed" = 0 ] || say "a worker failed: see $BUILD/cluster-worker*.log"
tail -n 2 "$BUILD/cluster-worker0.log" | sed 's/^/    worker 0: /'

acc=$("$IP" netns exec "$NS_W" "$build/fashion_softmax" --servers \
      "$TMP/cluster.ini" --eval 2>&1 | sed -n 's/^test accuracy: //p')
say "final test accuracy of the model on the servers: ${acc:-none}"
awk -v a="$acc" -v m="$MIN_ACC" 'BEGIN { exit !(a != "" && a + 0 >= m) }' ||
    failed=1

# shellcheck disable=SC2086
kill -TERM $PSDS
for p in $PSDS; do wait "$p" || failed=1; done
PSDS=""
[ "$failed" = 0 ] || fail "see the messages above"
say "PASS (accuracy >= $MIN_ACC)"
