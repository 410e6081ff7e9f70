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

passed=0
failed=0
skipped=0
skips=""
here=$(dirname "$0")
for t in test_frame test_config test_updater test_table test_sync test_dedup test_snapshot test_log test_npy \
         test_slice \
         test_arff test_proxy test_e2e test_auth test_modes test_faults test_stats test_durable \
         test_ops test_limits test_conn test_numerics test_ts \
         test_fuzz_regressions.sh test_install.sh test_examples.sh \
         test_python.sh test_multihost.sh; do
    echo "# ---- $t"
    case $t in
    *.sh) out=$(sh "$here/$t" "$BUILD" 2>&1) ;;
    *) out=$("$BUILD/$t" 2>&1) ;;
    esac
    rc=$?
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
[ "$skipped" -gt 0 ] && printf '%s\n%d skipped\n' "$skips" "$skipped"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
