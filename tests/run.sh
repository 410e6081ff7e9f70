#!/bin/sh
# Runs every test program of the suite and prints one grand total, since
# cmocka prints a summary per group only. A test that cannot run here
# says `ok N - name # SKIP reason` (TAP; cmocka's skip() says
# `not ok N # SKIP name`); skips are counted apart and listed before the
# total, never as passed. Each program reports in TAP
# (CMOCKA_MESSAGE_OUTPUT=TAP); a program that exits non-zero without a
# failing test line (a crash, a sanitizer report) counts as one failure.
# Usage: tests/run.sh BUILD_DIR
BUILD=${1:?usage: tests/run.sh BUILD_DIR}
PSD_BIN=$(cd "$BUILD" && pwd)/psd
PSCTL_BIN=$(cd "$BUILD" && pwd)/psctl
PSD_SRC_DIR=$(cd "$(dirname "$0")/.." && pwd)
export PSD_BIN PSCTL_BIN PSD_SRC_DIR
export CMOCKA_MESSAGE_OUTPUT=TAP
# A hostile-input test makes msgpack-c ask for huge blocks on purpose in
# the sanitizer build; let malloc fail instead of aborting.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}

# Programs run PSD_TEST_JOBS at a time (1, 2 or 3, the default; most of
# their time is spent waiting on sockets, timers and psd processes: the C
# programs take 22 s of CPU in 250 s of wall time on a 2-core VM). Each
# gets its own range of loopback ports below the kernel's ephemeral ones
# (PSD_TEST_PORTS=LO-HI, read by tests/cluster.c, tests/python/
# psdcluster.py, test_install.sh and examples/run_faults.sh), so that no
# two programs pick one port; and each run of this script its own block
# of them (up to four runs at once on a host, make test beside make
# sanitize; a fifth runs one program at a time on the kernel's ports).
# Reports are printed in the order of the list as soon as each one and
# those before it are done, each whole, with the seconds it took.
here=$(dirname "$0")
case ${PSD_TEST_JOBS:-3} in
1) jobs=1 ;;
2) jobs=2 ;;
*) jobs=3 ;;
esac
tests="test_frame test_config test_updater test_table test_sync test_dedup
       test_snapshot test_log test_npy test_slice test_arff test_proxy
       test_e2e test_auth test_modes test_faults test_stats test_durable
       test_ops test_limits test_conn test_numerics test_ts
       test_fuzz_regressions.sh test_install.sh test_examples.sh
       test_python.sh test_multihost.sh"
# The longest first, so that the last to finish is a short one.
first="test_durable test_modes test_faults test_ops test_python.sh
       test_limits test_multihost.sh test_auth test_conn test_examples.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/psd-run.XXXXXX") || exit 1

# This run's block of 3000 ports (20000 + 3000 * block), held by a lock
# folder naming this shell; a lock whose shell is gone is taken over.
# Only blocks below the kernel's ephemeral ports (ip_local_port_range,
# 32768 by default) are used: a port the kernel may hand any outgoing
# connection meanwhile is no test's to count on.
eph=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
case $eph in
''|*[!0-9]*) eph=32768 ;;
esac
blocks=$(( (eph - 20000) / 3000 ))
[ "$blocks" -gt 4 ] && blocks=4
[ "$blocks" -lt 0 ] && blocks=0
block=0
lock=
while [ "$block" -lt "$blocks" ]; do
    lock=${TMPDIR:-/tmp}/psd-test-ports.$block
    if mkdir "$lock" 2>/dev/null; then
        echo $$ >"$lock/pid"
        break
    fi
    owner=$(cat "$lock/pid" 2>/dev/null)
    if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
        rm -rf "$lock"
        continue
    fi
    block=$((block + 1))
    lock=
done
if [ "$block" -ge "$blocks" ]; then
    if [ "$blocks" -eq 0 ]; then
        echo "# the kernel's ephemeral ports start at $eph, below the test" \
             "port blocks (20000 and up): one program at a time, on the" \
             "kernel's ports"
    else
        echo "# $blocks other runs hold the test port blocks: one program" \
             "at a time, on the kernel's ports"
    fi
    block=
    jobs=1
fi
cleanup() {
    rm -rf "$tmp"
    [ -n "$lock" ] && rm -rf "$lock"
}
trap cleanup EXIT
# Slots are background jobs, which ignore SIGINT: on Ctrl-C (or TERM)
# every process of the group goes, test programs and their psd nodes
# included (psd nodes also go with their test program, PR_SET_PDEATHSIG).
trap 'trap "" INT TERM; kill -TERM 0 2>/dev/null; exit 130' INT TERM

# run_one TEST SLOT: runs one program, its report, status and seconds
# into $tmp (the status last: the main loop waits for it).
run_one() {
    ports=
    if [ -n "$block" ]; then
        lo=$((20000 + block * 3000 + $2 * 1000))
        ports=$lo-$((lo + 999))
    fi
    t0=$(date +%s)
    case $1 in
    *.sh) PSD_TEST_PORTS=$ports sh "$here/$1" "$BUILD" >"$tmp/$1.out" 2>&1 ;;
    *) PSD_TEST_PORTS=$ports "$BUILD/$1" >"$tmp/$1.out" 2>&1 ;;
    esac
    rc=$?
    echo $(($(date +%s) - t0)) >"$tmp/$1.secs"
    echo $rc >"$tmp/$1.rc.new" && mv "$tmp/$1.rc.new" "$tmp/$1.rc"
}

# A slot takes the next program nobody has taken (mkdir is atomic).
slot() {
    for t in $first $tests; do
        mkdir "$tmp/taken.$t" 2>/dev/null || continue
        run_one "$t" "$1"
    done
}

i=0
slots=
while [ "$i" -lt "$jobs" ]; do
    slot "$i" &
    slots="$slots $!"
    i=$((i + 1))
done

# Whether a slot still runs.
slots_alive() {
    for pid in $slots; do
        kill -0 "$pid" 2>/dev/null && return 0
    done
    return 1
}

passed=0
failed=0
skipped=0
skips=""
for t in $tests; do
    # Its turn in the list: wait for it (a slot writes .rc last; with no
    # slot left, it never ran: a failure below).
    while [ ! -f "$tmp/$t.rc" ] && slots_alive; do
        sleep 1
    done
    echo "# ---- $t ($(cat "$tmp/$t.secs" 2>/dev/null || echo '?') s)"
    out=$(cat "$tmp/$t.out" 2>/dev/null)
    rc=$(cat "$tmp/$t.rc" 2>/dev/null || echo 1)
    printf '%s\n' "$out"
    # cmocka reports a skip() as `not ok N # SKIP name`.
    p=$(printf '%s\n' "$out" | grep '^ok ' | grep -vc '# SKIP')
    s=$(printf '%s\n' "$out" | grep -E '^(not )?ok ' | grep -c '# SKIP')
    f=$(printf '%s\n' "$out" | grep '^not ok ' | grep -vc '# SKIP')
    if [ "$s" -gt 0 ]; then
        skipped=$((skipped + s))
        skips="$skips
SKIP: $t: $(printf '%s\n' "$out" | sed -n 's/^\(not \)\{0,1\}ok .*# SKIP //p' | head -1)"
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $t exited with status $rc"
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
done
wait
[ "$skipped" -gt 0 ] && printf '%s\n%d skipped\n' "$skips" "$skipped"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
