#!/bin/sh
# The Reuters-21578 "Grain" demo behind `make run-sparse`: starts every psd
# node of the cluster, runs examples/reuters_lr (it forks 4 workers that
# train sparse logistic regression, then evaluates the model as a reader),
# and stops the nodes. Passes when reuters_lr reports that the test AUC met
# its target and every node exits cleanly.
# Usage: run_sparse.sh BUILD_DIR INI DATA_DIR [EPOCHS]   (EPOCHS: default 10)
set -u

USAGE="usage: run_sparse.sh BUILD_DIR INI DATA_DIR [EPOCHS]"
BUILD=${1:?$USAGE}
INI=${2:?$USAGE}
DATA=${3:?$USAGE}
EPOCHS=${4:-10}
WORKERS=4

PROG=run_sparse
# shellcheck source=examples/cluster.sh
. "$(dirname "$0")/cluster.sh"
VERBOSE=1                       # report each node's start and exit

# ---- setup -------------------------------------------------------------------

[ -x "$BUILD/psd" ] || fail "$BUILD/psd not found; run make first"
[ -x "$BUILD/reuters_lr" ] || fail "$BUILD/reuters_lr not found; run make first"
[ -r "$INI" ] || fail "cannot read $INI"
# $BUILD for conf/reuters.ini, $BUILD/runs/run_sparse-NAME for another.
LOGS=$(log_dir "$BUILD" "$INI" "$(dirname "$0")/../conf/reuters.ini") ||
    fail "cannot create a folder for the logs in $BUILD/runs"
NODE_LOGS="$LOGS/reuters-"      # $LOGS/reuters-nodeN.log
LOG="$LOGS/reuters_lr.log"
for f in ReutersGrain-train.arff ReutersGrain-test.arff; do
    [ -r "$DATA/$f" ] ||
        fail "cannot read $DATA/$f (make run-sparse fetches it)"
done

NODES=$(ini_nodes "$INI")
[ -n "$NODES" ] || fail "no [cluster] nodes line in $INI"
NNODES=$(printf '%s\n' "$NODES" | wc -l | tr -d ' ')

say "sparse logistic regression on Reuters-21578 Grain over psd"
say "$NNODES psd nodes from $INI, $WORKERS worker processes, $EPOCHS epochs"
say "logs: ${NODE_LOGS}node*.log, $LOG"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/run_sparse.XXXXXX") ||
    fail "cannot create a temporary folder"

# A psd left over from an earlier run would answer in place of ours, and
# the model must start from an empty table.
ports_free fail

# ---- servers -----------------------------------------------------------------

if ! start_nodes "$INI"; then
    show_node_logs
    fail "the psd nodes did not come up"
fi
say "all $NNODES nodes accept connections"

# ---- training and evaluation -------------------------------------------------

# reuters_lr writes into a fifo that tee reads, so that its output shows
# live and goes to $LOG, and $! is reuters_lr itself.
mkfifo "$TMP/out" || fail "cannot create a fifo in $TMP"
tee "$LOG" <"$TMP/out" &
HELPER_PIDS="$!"
"$BUILD/reuters_lr" --servers "$INI" --data "$DATA" --workers "$WORKERS" \
    --epochs "$EPOCHS" >"$TMP/out" 2>&1 &
WORKER_PIDS="$!"
wait "$WORKER_PIDS"
rc=$?
WORKER_PIDS=""
wait "$HELPER_PIDS"
HELPER_PIDS=""

# ---- verdict -----------------------------------------------------------------

failed=0
case $rc in
0) ;;
3) say "the test AUC missed its target"; failed=1 ;;
*) say "reuters_lr failed with status $rc (see $LOG)"; failed=1 ;;
esac

say "stopping the psd nodes"
stop_nodes || failed=1

[ "$failed" -eq 0 ] || fail "see the messages above"
say "PASS"
