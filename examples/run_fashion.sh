#!/bin/sh
# The Fashion-MNIST demo behind `make run`: starts every psd node of the
# cluster, trains softmax regression with two asynchronous workers, checks the
# test accuracy and stops the nodes. Usage: run_fashion.sh BUILD_DIR INI
set -u

USAGE="usage: run_fashion.sh BUILD_DIR INI"
BUILD=${1:?$USAGE}
INI=${2:?$USAGE}
WORKERS=2
MIN_ACC=0.80
UP_TIMEOUT=10       # seconds for every node to accept connections
STOP_TIMEOUT=5      # seconds between SIGTERM and SIGKILL

DAEMONS=""          # pids of the psd nodes started here, in node order
WORKER_PIDS=""      # pids of running fashion_softmax workers
TEE_PIDS=""         # pids of the tee copying each worker's output to its log
TMP=""              # scratch folder for the workers' fifos

say() { printf 'run_fashion: %s\n' "$*"; }
fail() { printf 'run_fashion: FAIL: %s\n' "$*" >&2; exit 1; }

# A short sleep; `sleep 0.1` is not POSIX, so fall back to a whole second.
nap() { sleep 0.1 2>/dev/null || sleep 1; }

now() { date +%s; }

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

# Runs on every exit, including failures and Ctrl-C: whatever is still
# running gets stopped, so no psd is left holding the ports.
cleanup() {
    rc=$?
    trap - EXIT
    if [ -n "$WORKER_PIDS$DAEMONS$TEE_PIDS" ]; then
        say "stopping what is still running"
        # shellcheck disable=SC2086  # word splitting of pid lists wanted
        stop $WORKER_PIDS $TEE_PIDS $DAEMONS ||
            say "some processes ignored SIGTERM for ${STOP_TIMEOUT}s; killed"
    fi
    [ -n "$TMP" ] && rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Prints "host port" for each node of the [cluster] nodes line, e.g.
# `nodes = 127.0.0.1:7070, 127.0.0.1:7071 ; comment`. Wildcard addresses
# become loopback, which is where this script connects.
ini_nodes() {
    awk '
        /^[ \t]*\[/ {
            sect = $0; sub(/[;#].*/, "", sect); gsub(/[][ \t\r]/, "", sect)
            next
        }
        sect == "cluster" && /^[ \t]*nodes[ \t]*=/ {
            sub(/^[^=]*=/, ""); sub(/[;#].*/, "")
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

show_daemon_logs() {
    n=0
    for p in $DAEMONS; do
        say "last lines of $BUILD/psd-node$n.log:"
        tail -n 15 "$BUILD/psd-node$n.log" 2>/dev/null | sed 's/^/    /'
        n=$((n + 1))
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

# start_worker I: runs worker I in the background, its output both on the
# terminal and in $BUILD/workerI.log. The worker writes into a fifo that tee
# reads, so that $! is the worker itself and `wait` returns its status.
start_worker() {
    fifo="$TMP/worker$1"
    mkfifo "$fifo" || return 1
    tee "$BUILD/worker$1.log" <"$fifo" &
    TEE_PIDS="$TEE_PIDS $!"
    "$BUILD/fashion_softmax" --servers "$INI" --worker "$1" \
        --workers "$WORKERS" >"$fifo" 2>&1 &
    WORKER_PIDS="$WORKER_PIDS $!"
}

# Stops the nodes with SIGTERM and checks that each exits 0 in time.
stop_daemons() {
    ok=0
    # shellcheck disable=SC2086
    stop $DAEMONS || { say "a psd node ignored SIGTERM; killed it"; ok=1; }
    n=0
    for p in $DAEMONS; do
        wait "$p"
        st=$?
        if [ "$st" -eq 0 ]; then
            say "psd node $n exited 0"
        else
            say "psd node $n exited with status $st (see $BUILD/psd-node$n.log)"
            ok=1
        fi
        n=$((n + 1))
    done
    DAEMONS=""
    return $ok
}

# at_least A MIN: true if the number A is >= MIN.
at_least() {
    awk -v a="$1" -v m="$2" 'BEGIN { exit !(a != "" && a + 0 >= m + 0) }'
}

# ---- setup -------------------------------------------------------------------

[ -x "$BUILD/psd" ] || fail "$BUILD/psd not found; run make first"
[ -x "$BUILD/fashion_softmax" ] ||
    fail "$BUILD/fashion_softmax not found; run make first"
[ -r "$INI" ] || fail "cannot read $INI"

NODES=$(ini_nodes "$INI")
if [ -z "$NODES" ]; then
    say "no [cluster] nodes line in $INI; assuming 127.0.0.1:7070, :7071"
    NODES="127.0.0.1 7070
127.0.0.1 7071"
fi
NNODES=$(printf '%s\n' "$NODES" | wc -l | tr -d ' ')

say "Fashion-MNIST softmax regression over psd"
say "$NNODES psd nodes from $INI, $WORKERS asynchronous workers;" \
    "pass if test accuracy >= $MIN_ACC"
say "logs: $BUILD/psd-node*.log, $BUILD/worker*.log"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/run_fashion.XXXXXX") ||
    fail "cannot create a temporary folder"

# A psd left over from an earlier run would answer in place of ours.
# shellcheck disable=SC2086
set -- $NODES
while [ $# -ge 2 ]; do
    if port_open "$1" "$2"; then
        fail "$1:$2 is already in use (a psd from an earlier run?)"
    fi
    shift 2
done

# ---- servers -----------------------------------------------------------------

n=0
while [ "$n" -lt "$NNODES" ]; do
    say "starting psd node $n"
    "$BUILD/psd" -c "$INI" -n "$n" >"$BUILD/psd-node$n.log" 2>&1 &
    DAEMONS="$DAEMONS $!"
    n=$((n + 1))
done

# shellcheck disable=SC2086
if ! wait_up $NODES; then
    show_daemon_logs
    fail "the psd nodes did not come up"
fi
say "all $NNODES nodes accept connections"

# ---- training ----------------------------------------------------------------

w=0
while [ "$w" -lt "$WORKERS" ]; do
    start_worker "$w" || fail "cannot start worker $w"
    w=$((w + 1))
done

failed=0
w=0
for p in $WORKER_PIDS; do
    wait "$p"
    st=$?
    if [ "$st" -ne 0 ]; then
        say "worker $w failed with status $st (see $BUILD/worker$w.log)"
        failed=1
    fi
    w=$((w + 1))
done
WORKER_PIDS=""
for p in $TEE_PIDS; do wait "$p"; done
TEE_PIDS=""

# ---- verdict -----------------------------------------------------------------

acc=$(sed -n 's/^final test accuracy: //p' "$BUILD/worker0.log" | tail -n 1)
eval_out=$("$BUILD/fashion_softmax" --servers "$INI" --eval 2>&1)
eval_rc=$?
eval_acc=$(printf '%s\n' "$eval_out" | sed -n 's/^test accuracy: //p')

say "final test accuracy (worker 0): ${acc:-none}"
if [ "$eval_rc" -ne 0 ]; then
    printf '%s\n' "$eval_out" >&2
    say "fashion_softmax --eval failed with status $eval_rc"
    failed=1
else
    say "test accuracy of the model on the servers after both workers:" \
        "${eval_acc:-none}"
fi
for a in "$acc" "$eval_acc"; do
    # A missing figure was reported above (failed worker or --eval).
    if [ -n "$a" ] && ! at_least "$a" "$MIN_ACC"; then
        say "accuracy $a is below $MIN_ACC"
        failed=1
    fi
done
if [ -z "$acc" ] || [ -z "$eval_acc" ]; then
    failed=1
fi

say "stopping the psd nodes"
stop_daemons || failed=1

[ "$failed" -eq 0 ] || fail "see the messages above"
say "PASS"
