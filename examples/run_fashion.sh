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

PROG=run_fashion
# shellcheck source=examples/cluster.sh
. "$(dirname "$0")/cluster.sh"
VERBOSE=1                   # report each node's start and exit

# start_worker I: runs worker I in the background, its output both on the
# terminal and in $LOGS/workerI.log. The worker writes into a fifo that tee
# reads, so that $! is the worker itself and `wait` returns its status.
start_worker() {
    fifo="$TMP/worker$1"
    mkfifo "$fifo" || return 1
    tee "$LOGS/worker$1.log" <"$fifo" &
    HELPER_PIDS="$HELPER_PIDS $!"
    "$BUILD/fashion_softmax" --servers "$INI" --worker "$1" \
        --workers "$WORKERS" >"$fifo" 2>&1 &
    WORKER_PIDS="$WORKER_PIDS $!"
}

# worker_exited I STATUS: wait_each's report for the workers.
worker_exited() {
    [ "$2" -eq 0 ] ||
        say "worker $1 failed with status $2 (see $LOGS/worker$1.log)"
}

# ---- setup -------------------------------------------------------------------

[ -x "$BUILD/psd" ] || fail "$BUILD/psd not found; run make first"
[ -x "$BUILD/fashion_softmax" ] ||
    fail "$BUILD/fashion_softmax not found; run make first"
[ -r "$INI" ] || fail "cannot read $INI"
# $BUILD for conf/cluster-2.ini, $BUILD/runs/run_fashion-NAME for another.
LOGS=$(log_dir "$BUILD" "$INI" "$(dirname "$0")/../conf/cluster-2.ini") ||
    fail "cannot create a folder for the logs in $BUILD/runs"
NODE_LOGS="$LOGS/psd-"      # $LOGS/psd-nodeN.log

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
say "logs: $LOGS/psd-node*.log, $LOGS/worker*.log"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/run_fashion.XXXXXX") ||
    fail "cannot create a temporary folder"

# A psd left over from an earlier run would answer in place of ours.
ports_free fail

# ---- servers -----------------------------------------------------------------

if ! start_nodes "$INI"; then
    show_node_logs
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
# shellcheck disable=SC2086
wait_each worker_exited $WORKER_PIDS || failed=1
WORKER_PIDS=""
for p in $HELPER_PIDS; do wait "$p"; done
HELPER_PIDS=""

# ---- verdict -----------------------------------------------------------------

acc=$(sed -n 's/^final test accuracy: //p' "$LOGS/worker0.log" | tail -n 1)
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
stop_nodes || failed=1
# Where the trained model is: each node's last snapshot (SIGTERM wrote it).
data=$(ini_data_dir "$INI")
if [ "$failed" -eq 0 ]; then
    say "the model is in ${data:-/var/lib/psd} (psd-node*): start the nodes" \
        "again to serve it, or $(realpath "$BUILD/psd") --export DIR -c" \
        "'$(realpath "$INI")' writes it" \
        "as .npy files"
fi

[ "$failed" -eq 0 ] || fail "see the messages above"
say "PASS"
