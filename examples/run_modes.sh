#!/bin/sh
# The training-mode demonstrations of examples/fashion_mlp: (a) async, bsp
# and ssp with 4 workers each, (b) bsp against one process doing the work
# of all 4 (same examples per step), (c) bsp and ssp with stragglers:
# (c1) worker 3 sleeps on random steps, twice each in the order bsp ssp
# ssp bsp, so that a change in the machine's load weighs on both modes
# alike; (c2) every worker sleeps the same way, each on its own steps.
# Every run gets fresh psd nodes, started from a copy of the cluster's ini
# that keeps only the run's two tables and sets its worker count: clocks
# are per cluster, and each run must start from the seeded initial weights.
# Prints a summary and exits non-zero when a target is missed.
# Usage: run_modes.sh BUILD_DIR [INI]   (INI: default conf/fashion-mlp.ini)
set -u

USAGE="usage: run_modes.sh BUILD_DIR [INI]"
BUILD=${1:?$USAGE}
INI=${2:-$(dirname "$0")/../conf/fashion-mlp.ini}
WORKERS=4
EPOCHS=5
BATCH=32            # per worker and step; the single process uses 4 x 32
STRAGGLER=$((WORKERS - 1))     # the slow worker of (c1)
STRAGGLE_MS=6       # a straggler sleeps this long on a random 1 step in 4
MIN_ACC=0.85
MAX_DIFF=0.5        # points of accuracy between bsp and single, per epoch

OUT="$BUILD/mlp-runs"   # per-run ini files and logs
PROG=run_modes
# shellcheck source=examples/cluster.sh
. "$(dirname "$0")/cluster.sh"

# run_ini MODE WORKERS: prints INI with only the tables W1_MODE and W2_MODE
# and `workers = WORKERS` in [cluster]. Comments and the rest are kept.
run_ini() {
    awk -v mode="$1" -v workers="$2" '
        /^[ \t]*\[/ {
            sect = $0; sub(/[;#].*/, "", sect); gsub(/[][ \t\r]/, "", sect)
            keep = sect !~ /^table\./ || sect == "table.W1_" mode ||
                   sect == "table.W2_" mode
        }
        keep && sect == "cluster" && /^[ \t]*workers[ \t]*=/ {
            print "workers = " workers; next
        }
        keep' "$INI"
}

# worker_exited I STATUS: wait_each's report for the current run's workers.
worker_exited() {
    [ "$2" -eq 0 ] && return 0
    say "$name: worker $1 failed with status $2:"
    tail -n 5 "$OUT/$name-worker$1.log" | sed 's/^/    /'
}

# run NAME MODE CLUSTER_WORKERS PROCS: one training job on fresh nodes
# whose cluster has CLUSTER_WORKERS workers. PROCS is WORKERS (one process
# per worker; those listed in $SLOW also get $STRAGGLE_ARGS) or 1 (one
# --single process doing the work of all WORKERS). Logs go to
# $OUT/NAME-*.log. Prints worker 0's report; returns 1 if anything failed.
run() {
    name=$1 mode=$2 cw=$3 procs=$4
    ini="$OUT/$name.ini"
    run_ini "$mode" "$cw" >"$ini" || return 1
    # Taken: stop at once (a psd from an earlier run?), as run_fashion.sh
    # does; going on, every run failed alike and the summary read logs
    # that were never written.
    ports_free fail
    NODE_LOGS="$OUT/$name-"
    # Nodes that do not start (a bad data_dir, say) would not start for
    # the runs after either: their reason, then stop (a trial read ten
    # runs' "exited at startup", no reason, and a summary of logs never
    # written).
    if ! start_nodes "$ini"; then
        show_node_logs
        stop_nodes
        fail "psd did not start for run $name (its log above); the other runs would fail alike"
    fi

    w=0
    while [ "$w" -lt "$procs" ]; do
        if [ "$procs" -eq 1 ]; then
            who="--single"
        else
            who="--worker $w"
        fi
        case " $SLOW " in
        *" $w "*) who="$who $STRAGGLE_ARGS" ;;
        esac
        # shellcheck disable=SC2086  # $who is whole words
        "$BUILD/fashion_mlp" --servers "$ini" --mode "$mode" \
            --workers "$WORKERS" --epochs "$EPOCHS" --batch "$BATCH" $who \
            >"$OUT/$name-worker$w.log" 2>&1 &
        WORKER_PIDS="$WORKER_PIDS $!"
        w=$((w + 1))
    done

    ok=0
    # shellcheck disable=SC2086
    wait_each worker_exited $WORKER_PIDS || ok=1
    WORKER_PIDS=""
    stop_nodes || ok=1
    sed 's/^/    /' "$OUT/$name-worker0.log"
    return $ok
}

# run_each PART NOTE NAME...: runs each NAME (its mode, a dash, the rest)
# with WORKERS workers after saying "(PART) NAME: MODE, N workers; NOTE".
# Adds the names to RUNS and sets failed=1 if a run fails.
run_each() {
    part=$1 note=$2
    shift 2
    for r in "$@"; do
        m=${r%%-*}
        say "($part) $r: $m, $WORKERS workers; $note"
        run "$r" "$m" "$WORKERS" "$WORKERS" || failed=1
        RUNS="$RUNS $r"
    done
}

# Figures from a run's worker 0 log.
accs() {            # the accuracy after each epoch, space-separated
    sed -n 's/^epoch [0-9]*: test accuracy \([0-9.]*\),.*/\1/p' \
        "$OUT/$1-worker0.log" | tr '\n' ' '
}
final_acc() { sed -n 's/^final test accuracy: //p' "$OUT/$1-worker0.log"; }
wall() {            # seconds from the first step to the final evaluation
    sed -n 's/^total wall time: \([0-9.]*\) s/\1/p' "$OUT/$1-worker0.log"
}

# ---- setup -------------------------------------------------------------------

[ -x "$BUILD/psd" ] || fail "$BUILD/psd not found; run make first"
[ -x "$BUILD/fashion_mlp" ] ||
    fail "$BUILD/fashion_mlp not found; run make first"
[ -r "$INI" ] || fail "cannot read $INI"
mkdir -p "$OUT" || fail "cannot create $OUT"
# $BUILD/mlp-runs for conf/fashion-mlp.ini, $BUILD/runs/run_modes-NAME for
# another ini: a run beside this one keeps (and clears) its own files.
OUT=$(log_dir "$OUT" "$INI" "$(dirname "$0")/../conf/fashion-mlp.ini") ||
    fail "cannot create a folder for the logs in $BUILD/runs"
rm -f "$OUT"/*.ini "$OUT"/*.log     # figures of an earlier run would mislead

NODES=$(ini_nodes "$INI")
[ -n "$NODES" ] || fail "no [cluster] nodes line in $INI"
NNODES=$(printf '%s\n' "$NODES" | wc -l | tr -d ' ')

say "Fashion-MNIST MLP over psd: $NNODES nodes from $INI, $WORKERS workers," \
    "$EPOCHS epochs, batch $BATCH per worker"
say "targets: test accuracy >= $MIN_ACC in every mode; bsp within" \
    "$MAX_DIFF points of a single process per epoch; with stragglers" \
    "ssp finishes before bsp"
say "logs and per-run ini files: $OUT"

failed=0
RUNS=""             # every run, in order, for the summary
SLOW=""             # the workers that straggle in the current run
STRAGGLE_ARGS=""
for m in async bsp ssp; do
    say "(a) $m, $WORKERS workers"
    run "$m" "$m" "$WORKERS" "$WORKERS" || failed=1
    RUNS="$RUNS $m"
done
say "(b) one process doing the work of $WORKERS bsp workers" \
    "(batch $((WORKERS * BATCH)), a 1-worker cluster)"
run single bsp 1 1 || failed=1
RUNS="$RUNS single"
STRAGGLE_ARGS="--straggle $STRAGGLE_MS"
SLOW=$STRAGGLER
run_each c1 "worker $STRAGGLER sleeps ${STRAGGLE_MS} ms on a random 1 step in 4\
 (the same steps every run)" bsp-slow3-1 ssp-slow3-1 ssp-slow3-2 bsp-slow3-2
SLOW=$(seq 0 $((WORKERS - 1)) | tr '\n' ' ')
run_each c2 "each sleeps ${STRAGGLE_MS} ms on its own random 1 step in 4" \
    bsp-slowall ssp-slowall

# ---- summary -----------------------------------------------------------------

echo
say "summary (accuracy on the 10,000 test images; wall: first step to the" \
    "final evaluation, seconds)"
printf '  %-16s %-40s %7s %7s\n' run "accuracy after each epoch" final wall
for r in $RUNS; do
    printf '  %-16s %-40s %7s %7s\n' "$r" "$(accs "$r")" \
        "$(final_acc "$r")" "$(wall "$r")"
done

# (a) the accuracy target, in every run.
for r in $RUNS; do
    a=$(final_acc "$r")
    if ! at_least "$a" "$MIN_ACC"; then
        say "MISSED: $r reached test accuracy ${a:-none} < $MIN_ACC"
        failed=1
    fi
done

# (b) bsp against the single process, epoch by epoch.
diffs=$(printf '%s\n%s\n' "$(accs bsp)" "$(accs single)" | awk '
    NR == 1 { n = split($0, a, " ") }
    NR == 2 { m = split($0, b, " ") }
    END {
        if (n == 0 || n != m) { print "none"; exit }
        max = 0; line = ""
        for (i = 1; i <= n; i++) {
            d = (a[i] - b[i]) * 100; if (d < 0) d = -d
            if (d > max) max = d
            line = line sprintf(" %.2f", d)
        }
        printf "%s max %.2f\n", line, max
    }')
say "(b) |bsp - single| per epoch, points:$diffs"
case $diffs in
*"max "*)
    if ! at_least "$MAX_DIFF" "${diffs##*max }"; then
        say "MISSED: bsp differs from the single process by more than" \
            "$MAX_DIFF points"
        failed=1
    fi ;;
*)
    say "MISSED: no per-epoch accuracies to compare"
    failed=1 ;;
esac

# faster_ssp WHAT BSP_S SSP_S: reports whether ssp took less time than bsp
# and fails the run if not.
faster_ssp() {
    if [ -n "$2" ] && [ -n "$3" ] &&
       awk -v b="$2" -v s="$3" 'BEGIN { exit !(s < b) }'; then
        pct=$(awk -v b="$2" -v s="$3" 'BEGIN { printf "%.0f%%", 100 * s / b }')
        say "$1: ssp finished the same $EPOCHS epochs in $pct of bsp's time"
    else
        say "MISSED: $1: ssp did not finish before bsp"
        failed=1
    fi
}

# (c1) one slow worker: the sums of both runs of each mode.
tb=$(awk -v a="$(wall bsp-slow3-1)" -v b="$(wall bsp-slow3-2)" \
    'BEGIN { if (a != "" && b != "") printf "%.1f", a + b }')
ts=$(awk -v a="$(wall ssp-slow3-1)" -v b="$(wall ssp-slow3-2)" \
    'BEGIN { if (a != "" && b != "") printf "%.1f", a + b }')
slept=$(sed -n 's/^worker [0-9]* slept \([0-9.]*\) s.*/\1/p' \
    "$OUT/ssp-slow3-1-worker$STRAGGLER.log")
say "(c) without stragglers: bsp $(wall bsp) s, ssp $(wall ssp) s"
say "(c1) worker $STRAGGLER slow (it sleeps ${slept:-?} s per run), two runs" \
    "each: bsp ${tb:-?} s, ssp ${ts:-?} s in all; per run that is bsp" \
    "$(awk -v t="$tb" -v t0="$(wall bsp)" \
        'BEGIN { printf "%+.1f", t / 2 - t0 }') s, ssp" \
    "$(awk -v t="$ts" -v t0="$(wall ssp)" \
        'BEGIN { printf "%+.1f", t / 2 - t0 }') s against no straggler"
faster_ssp "(c1)" "$tb" "$ts"
say "(c2) every worker slow on its own steps: bsp $(wall bsp-slowall) s," \
    "ssp $(wall ssp-slowall) s"
faster_ssp "(c2)" "$(wall bsp-slowall)" "$(wall ssp-slowall)"

[ "$failed" -eq 0 ] || fail "see the messages above"
say "PASS"
