#!/bin/sh
# `make run-faults`: the Fashion-MNIST softmax demo twice, once on a clean
# loopback cluster and once with every node behind a fault proxy that drops
# 20% of the frames both ways, and with node 1 killed (SIGKILL) and
# restarted during training (from its snapshot and journal). Prints both
# accuracies; passes when the faulty run ends within 2 points of the clean
# one. The ini files and the logs of the nodes, workers and proxies stay in
# BUILD_DIR/faults; the nodes' data goes to a temporary folder.
# Usage: run_faults.sh BUILD_DIR
set -u

BUILD=${1:?usage: run_faults.sh BUILD_DIR}
WORKERS=2
EPOCHS=${FAULT_EPOCHS:-3}
DROP=${FAULT_DROP:-0.2}
MAX_LOSS=0.02               # accuracy points the faults may cost
TIMEOUT_MS=50               # per attempt: a dropped frame costs this much

PROG=run_faults
# shellcheck source=examples/cluster.sh
. "$(dirname "$0")/cluster.sh"
NODE_LOGS=""

for f in psd fashion_softmax faultproxy; do
    [ -x "$BUILD/$f" ] || fail "$BUILD/$f not found; run make first"
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/run_faults.XXXXXX") ||
    fail "cannot create a temporary folder"
OUT="$BUILD/faults"     # ini files and logs, kept after the run
mkdir -p "$OUT" || fail "cannot create $OUT"
rm -f "$OUT"/*.ini "$OUT"/*.log "$OUT"/*.out "$OUT"/*.err

# free_ports N: N distinct ports nothing listens on now, all bound at
# once while they are chosen (one at a time, the same port could come
# twice); under tests/run.sh, from the range it gives this program
# (PSD_TEST_PORTS=LO-HI), where no other program running beside it looks;
# otherwise below the kernel's ephemeral range.
free_ports() {
    python3 -c 'import os, socket, sys
n = int(sys.argv[1])
ss = [socket.socket() for _ in range(n)]
spec = os.environ.get("PSD_TEST_PORTS", "")
try:
    lo, hi = (int(x) for x in spec.split("-")) if spec else (0, 0)
except ValueError:
    lo = hi = -1
if spec and not 1 <= lo <= hi <= 65535:
    sys.exit("PSD_TEST_PORTS=%s: expected LO-HI, 1 <= LO <= HI <= 65535"
             % spec)
if lo:
    got, p = 0, lo + os.getpid() % (hi - lo + 1)
    for _ in range(hi - lo + 1):
        try:
            ss[got].bind(("127.0.0.1", p))
            got += 1
        except OSError:
            pass
        if got == n:
            break
        p = lo if p == hi else p + 1
    if got < n:
        sys.exit("no free ports in PSD_TEST_PORTS")
else:
    # Below the ephemeral ports of the kernel (32768 by default), which
    # any outgoing connection may hold when a node restarts (psd warns
    # of them), and below the ranges tests/run.sh gives its programs:
    # from 10000 up, starting anywhere in the first half.
    got, p = 0, 10000 + os.getpid() % 5000
    while got < n and p < 20000:
        try:
            ss[got].bind(("127.0.0.1", p))
            got += 1
        except OSError:
            pass
        p += 1
    if got < n:
        sys.exit("no free ports between 10000 and 19999")
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# write_ini FILE NODES [LISTEN]: a 2-node cluster with the demo's table.
write_ini() {
    {
        echo "[cluster]"
        echo "nodes = $2"
        [ -n "${3:-}" ] && echo "listen = $3"
        echo "shards = 16"
        echo "workers = $WORKERS"
        echo "[server]"
        echo "data_dir = $TMP/data"
        echo "durability = log"          # a restarted node loses nothing
        echo "fsync = everysec"
        echo "[table.fashion]"
        echo "kind = dense"
        echo "rows = 785"
        echo "dim = 10"
        echo "updater = sgd"
        echo "lr = 0.1"
    } >"$1"
}

# start_workers INI TAG: starts the workers against INI; worker I's output
# goes to $OUT/TAG.workerI.log.
start_workers() {
    w=0
    while [ "$w" -lt "$WORKERS" ]; do
        "$BUILD/fashion_softmax" --servers "$1" --worker "$w" \
            --workers "$WORKERS" --epochs "$EPOCHS" \
            --timeout-ms "$TIMEOUT_MS" >"$OUT/$2.worker$w.log" 2>&1 &
        WORKER_PIDS="$WORKER_PIDS $!"
        w=$((w + 1))
    done
}

worker_exited() {
    [ "$2" -eq 0 ] || say "worker $1 failed with status $2"
}

# finish_workers: waits for every worker; returns 1 if one failed.
finish_workers() {
    finished=0
    # shellcheck disable=SC2086
    wait_each worker_exited $WORKER_PIDS || finished=1
    WORKER_PIDS=""      # reaped: the exit trap must not signal them
    return $finished
}

accuracy() {
    sed -n 's/^final test accuracy: //p' "$OUT/$1.worker0.log" | tail -n 1
}

# ---- the clean run ------------------------------------------------------------

# Not read from a here-document, which drops free_ports's failure (a
# trial's ini got empty ports, and the error was psd's about them).
ports=$(free_ports 2) || fail "cannot pick 2 ports (above)"
read -r p0 p1 <<EOF
$ports
EOF
write_ini "$OUT/clean.ini" "127.0.0.1:$p0, 127.0.0.1:$p1"
NODES="127.0.0.1 $p0
127.0.0.1 $p1"
NNODES=2
NODE_LOGS="$OUT/clean-"
say "clean run: 2 nodes, $WORKERS workers, $EPOCHS epochs"
start_nodes "$OUT/clean.ini" || { show_node_logs; fail "nodes did not start"; }
t0=$(date +%s.%N)
start_workers "$OUT/clean.ini" clean
finish_workers || fail "the clean run failed (see $OUT)"
t1=$(date +%s.%N)
stop_nodes || fail "a node did not stop cleanly"
clean=$(accuracy clean)
say "clean run: test accuracy $clean"

# ---- the faulty run -----------------------------------------------------------

# Clients are told the proxies' ports; the nodes listen behind them.
ports=$(free_ports 4) || fail "cannot pick 4 ports (above)"
read -r q0 q1 l0 l1 <<EOF
$ports
EOF
write_ini "$OUT/faulty.ini" "127.0.0.1:$q0, 127.0.0.1:$q1" \
    "127.0.0.1:$l0, 127.0.0.1:$l1"
NODES="127.0.0.1 $l0
127.0.0.1 $l1"
NODE_LOGS="$OUT/faulty-"
say "faulty run: every node behind a proxy dropping $DROP of the frames" \
    "both ways; node 1 killed and restarted during training"
start_nodes "$OUT/faulty.ini" || { show_node_logs; fail "nodes did not start"; }
for i in 0 1; do
    eval "pub=\$q$i; priv=\$l$i"
    "$BUILD/faultproxy" --listen "$pub" --to "127.0.0.1:$priv" \
        --drop "$DROP" --skip-frames 1 --dir both --seed "$((i + 1))" \
        >"$OUT/proxy$i.out" 2>"$OUT/proxy$i.err" &
    HELPER_PIDS="$HELPER_PIDS $!"
done
wait_up 127.0.0.1 "$q0" 127.0.0.1 "$q1" || fail "the proxies did not start"
t2=$(date +%s.%N)
start_workers "$OUT/faulty.ini" faulty
sleep 1
say "killing node 1 (SIGKILL)"
node1=$(echo $DAEMONS | cut -d' ' -f2)
kill -KILL "$node1"
wait "$node1" 2>/dev/null
sleep 1
say "restarting node 1"
"$BUILD/psd" -c "$OUT/faulty.ini" -n 1 >>"${NODE_LOGS}node1.log" 2>&1 &
DAEMONS="$(echo $DAEMONS | cut -d' ' -f1) $!"
finish_workers || fail "the faulty run failed (see $OUT)"
t3=$(date +%s.%N)
# shellcheck disable=SC2086
stop $HELPER_PIDS
HELPER_PIDS=""
stop_nodes || say "a node did not stop cleanly"
faulty=$(accuracy faulty)
for i in 0 1; do
    say "proxy $i: $(tail -n 2 "$OUT/proxy$i.out" | tr '\n' ' ')"
done
grep -h 'epoch .*resends' "$OUT"/faulty.worker*.log | sed "s/^/$PROG: /"

wall() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f s", b - a }'; }
say "clean run:  test accuracy $clean, wall $(wall "$t0" "$t1")"
say "faulty run: test accuracy $faulty, wall $(wall "$t2" "$t3")"
if [ -z "$clean" ] || [ -z "$faulty" ]; then
    fail "an accuracy is missing (see $OUT)"
fi
if awk -v c="$clean" -v f="$faulty" -v m="$MAX_LOSS" \
        'BEGIN { exit !(f + 0 >= c - m) }'; then
    say "PASS: the faults cost $(awk -v c="$clean" -v f="$faulty" \
        'BEGIN { printf "%.4f", c - f }') points (allowed: $MAX_LOSS)"
else
    fail "the faults cost more than $MAX_LOSS points"
fi
