# shellcheck shell=sh
# Shell helpers shared by the demo scripts (run_fashion.sh, run_modes.sh,
# run_sparse.sh, run_faults.sh and run_cluster.sh), sourced by each
# (POSIX sh): start the psd nodes of an ini, wait for their ports, stop them
# with SIGTERM then SIGKILL and check that each exits 0, and a trap that
# stops whatever is still running when the script exits.
#
# Before sourcing, set PROG (the name that starts every message) and BUILD
# (the build folder, with psd in it). Before start_nodes, set NODES (from
# ini_nodes), NNODES and NODE_LOGS: node N logs to ${NODE_LOGS}nodeN.log.
# Setting VERBOSE=1 after sourcing also reports each node's start and
# clean exit.

# Run by itself it would define functions and end: say what to run.
case ${0##*/} in
cluster.sh)
    echo "examples/cluster.sh: helpers sourced by the examples/run_*.sh scripts (make run, make run-modes, ...); run one of those" >&2
    exit 2 ;;
esac

UP_TIMEOUT=10       # seconds for every node to accept connections
STOP_TIMEOUT=5      # seconds between SIGTERM and SIGKILL
VERBOSE=0

# What the exit trap cleans up; the scripts add to these as they go.
DAEMONS=""          # pids of the running psd nodes, in node order
WORKER_PIDS=""      # pids of the running trainer processes
HELPER_PIDS=""      # pids of helpers such as the tee behind a worker
TMP=""              # a scratch folder, removed on exit

say() { printf '%s: %s\n' "$PROG" "$*"; }
fail() { printf '%s: FAIL: %s\n' "$PROG" "$*" >&2; exit 1; }

# A short sleep; `sleep 0.1` is not POSIX, so fall back to a whole second.
nap() { sleep 0.1 2>/dev/null || sleep 1; }

now() { date +%s; }

# at_least A MIN: true if the number A is >= MIN.
at_least() {
    awk -v a="$1" -v m="$2" 'BEGIN { exit !(a != "" && a + 0 >= m + 0) }'
}

# alive PID: true while PID runs. A child that exited stays a zombie until
# the shell reaps it and kill -0 still succeeds on a zombie, so ask /proc
# for its state where there is one.
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ -r "/proc/$1/stat" ] || return 0
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ "$state" != Z ]
}

# stop PID...: SIGTERM, then SIGKILL whatever is still alive after
# STOP_TIMEOUT seconds. Returns 1 if something had to be killed.
stop() {
    [ $# -gt 0 ] || return 0
    for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
    end=$(($(now) + STOP_TIMEOUT))
    for p in "$@"; do
        while alive "$p" && [ "$(now)" -lt "$end" ]; do nap; done
    done
    killed=0
    for p in "$@"; do
        if alive "$p"; then
            kill -KILL "$p" 2>/dev/null
            killed=1
        fi
    done
    return $killed
}

# wait_each REPORT PID...: waits for each PID in turn and runs
# `REPORT I STATUS` for it, I counting from 0. Returns 1 if any status was
# not 0. REPORT must leave the variables i, p and st alone.
wait_each() {
    report=$1
    shift
    i=0 bad=0
    for p in "$@"; do
        wait "$p"
        st=$?
        [ "$st" -eq 0 ] || bad=1
        "$report" "$i" "$st"
        i=$((i + 1))
    done
    return $bad
}

# Runs on every exit, including failures and Ctrl-C: whatever is still
# running gets stopped, so no psd is left holding the ports.
cleanup() {
    rc=$?
    trap - EXIT
    if [ -n "$WORKER_PIDS$DAEMONS$HELPER_PIDS" ]; then
        say "stopping what is still running"
        # shellcheck disable=SC2086  # word splitting of pid lists wanted
        stop $WORKER_PIDS $HELPER_PIDS $DAEMONS ||
            say "some processes ignored SIGTERM for ${STOP_TIMEOUT}s; killed"
    fi
    [ -n "$TMP" ] && rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ini_nodes INI: prints "host port" for each node of the [cluster] nodes
# line, e.g. `nodes = 127.0.0.1:7070, 127.0.0.1:7071 ; comment`. Wildcard
# addresses become loopback, which is where the scripts connect.
ini_nodes() {
    # As psd reads them: "nodes =" or "nodes:", the list going on over
    # indented lines (comment lines among them), a BOM at the start (a
    # trial: such files fell back to 7070 and 7071).
    awk '
        NR == 1 { sub(/^\357\273\277/, "") }
        /^[ \t]*[;#]/ { next }
        /^[ \t]*\[/ {
            sect = $0; sub(/[;#].*/, "", sect); gsub(/[][ \t\r]/, "", sect)
            innodes = 0
            next
        }
        /^[^ \t]/ { innodes = 0 }
        sect == "cluster" && /^[ \t]*nodes[ \t]*[=:]/ {
            sub(/^[^=:]*[=:]/, ""); innodes = 1
        }
        innodes {
            sub(/[ \t];.*/, "")
            n = split($0, a, ",")
            for (i = 1; i <= n; i++) {
                e = a[i]; gsub(/[ \t\r]/, "", e)
                if (e == "") continue
                port = e; sub(/.*:/, "", port)
                host = e; sub(/:[^:]*$/, "", host); gsub(/[][]/, "", host)
                if (host == "0.0.0.0") host = "127.0.0.1"
                if (host == "::") host = "::1"
                print host, port
            }
        }' "$1"
}

# How to test a port: bash's /dev/tcp, else python3, else nothing.
if command -v bash >/dev/null 2>&1; then
    PROBE=bash
elif command -v python3 >/dev/null 2>&1; then
    PROBE=python3
else
    PROBE=none
fi

# port_open HOST PORT: true if something accepts connections there.
port_open() {
    case $PROBE in
    bash)
        bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$1" "$2" 2>/dev/null ;;
    python3)
        python3 -c 'import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()' \
            "$1" "$2" 2>/dev/null ;;
    *)
        return 1 ;;
    esac
}

# ports_free REPORT: runs `REPORT MESSAGE` and returns 1 for the first node
# whose port already answers (a psd from an earlier run would answer in
# place of ours). REPORT is say, or fail to end the script.
ports_free() {
    report=$1
    # shellcheck disable=SC2086
    set -- $NODES
    while [ $# -ge 2 ]; do
        if port_open "$1" "$2"; then
            "$report" "$1:$2 is already in use (a psd from an earlier run?)"
            return 1
        fi
        shift 2
    done
}

# wait_up HOST PORT ...: waits until every node accepts connections, at
# most UP_TIMEOUT seconds in all. Fails early if a node exits.
wait_up() {
    if [ "$PROBE" = none ]; then
        say "neither bash nor python3 to probe the ports; waiting 3 s"
        sleep 3
        return 0
    fi
    end=$(($(now) + UP_TIMEOUT))
    n=0
    while [ $# -ge 2 ]; do
        until port_open "$1" "$2"; do
            i=0
            for p in $DAEMONS; do
                alive "$p" || { say "psd node $i exited at startup"; return 1; }
                i=$((i + 1))
            done
            if [ "$(now)" -ge "$end" ]; then
                say "node $n ($1:$2) refuses connections after ${UP_TIMEOUT} s"
                return 1
            fi
            nap
        done
        shift 2
        n=$((n + 1))
    done
}

# log_dir DIR INI DEFAULT_INI: the folder a run keeps its logs in (made, and
# printed as an absolute path, which reads right after make -C too): DIR for
# its default ini, $BUILD/runs/$PROG-NAME for another one, NAME.ini. Two runs
# at once, each on its own copy of the ini (README), shared the logs, and
# one's verdict read the other's figure; copies of one name in two folders
# still share theirs.
log_dir() {
    d=$1
    [ "$(realpath "$2" 2>/dev/null)" = "$(realpath "$3" 2>/dev/null)" ] ||
        d="$BUILD/runs/$PROG-$(basename "$2" .ini)"
    mkdir -p "$d" && realpath "$d"
}

# ini_data_dir INI: prints the [server] data_dir of INI (empty if unset).
ini_data_dir() {
    awk '
        /^[ \t]*\[/ {
            sect = $0; sub(/[;#].*/, "", sect); gsub(/[][ \t\r]/, "", sect)
            next
        }
        sect == "server" && /^[ \t]*data_dir[ \t]*=/ {
            sub(/^[^=]*=[ \t]*/, ""); sub(/[ \t]+;.*/, ""); sub(/[ \t\r]*$/, "")
            print
        }' "$1"
}

# start_nodes INI: starts the NNODES psd nodes of INI in the background and
# waits until they all accept connections. Returns 1 if they do not; the
# nodes started are in DAEMONS either way, for stop_nodes.
start_nodes() {
    # The demos start from the initial values: snapshots and journals an
    # earlier run left in the ini's data_dir would otherwise be restored.
    data=$(ini_data_dir "$1")
    if [ -n "$data" ] && [ -d "$data" ]; then
        rm -f "$data"/psd-node*.snap "$data"/psd-node*.snap.tmp \
              "$data"/psd-node*.journal.*
    fi
    n=0
    while [ "$n" -lt "$NNODES" ]; do
        if [ "$VERBOSE" = 1 ]; then say "starting psd node $n"; fi
        "$BUILD/psd" -c "$1" -n "$n" >"${NODE_LOGS}node$n.log" 2>&1 &
        DAEMONS="$DAEMONS $!"
        n=$((n + 1))
    done
    # shellcheck disable=SC2086
    wait_up $NODES
}

# show_node_logs: prints the last lines of each node's log.
show_node_logs() {
    n=0
    for p in $DAEMONS; do
        say "last lines of ${NODE_LOGS}node$n.log:"
        tail -n 15 "${NODE_LOGS}node$n.log" 2>/dev/null | sed 's/^/    /'
        n=$((n + 1))
    done
}

# node_exited I STATUS: wait_each's report for the nodes.
node_exited() {
    if [ "$2" -ne 0 ]; then
        say "psd node $1 exited with status $2 (see ${NODE_LOGS}node$1.log)"
    elif [ "$VERBOSE" = 1 ]; then
        say "psd node $1 exited 0"
    fi
}

# stop_nodes: stops the nodes with SIGTERM and checks that each exits 0 in
# time. Returns 1 if one did not. (Shell variables are global: nodes_rc is
# named so as not to clobber a caller's.)
stop_nodes() {
    nodes_rc=0
    # shellcheck disable=SC2086
    stop $DAEMONS ||
        { say "a psd node ignored SIGTERM; killed it"; nodes_rc=1; }
    # shellcheck disable=SC2086
    wait_each node_exited $DAEMONS || nodes_rc=1
    DAEMONS=""
    return $nodes_rc
}
