#!/bin/sh
# Replays the fuzz targets' seed corpus and regression inputs
# (tests/fuzz/corpus/TARGET, tests/fuzz/regressions/TARGET and conf/*.ini
# for fuzz_config) through the plain builds of the targets in
# BUILD_DIR (tests/fuzz/replay.c: no clang, no libFuzzer), one process per
# input, so a crash names its file; then checks that the committed seeds
# are what make_seeds writes. Reports in TAP like the C tests.
# Usage: tests/test_fuzz_regressions.sh BUILD_DIR
BUILD=${1:?usage: tests/test_fuzz_regressions.sh BUILD_DIR}
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$BUILD" && pwd)
fz=$top/tests/fuzz
tmp=$(mktemp -d /tmp/psd-fuzz-replay-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM

# "TARGET FILE" per line, in a fixed order.
for t in fuzz_frame fuzz_msg fuzz_config fuzz_request fuzz_snapshot \
         fuzz_journal; do
    for d in "$fz/corpus/$t" "$fz/regressions/$t"; do
        [ -d "$d" ] && find "$d" -type f ! -name README.md | LC_ALL=C sort |
            sed "s|^|$t |"
    done
    [ "$t" = fuzz_config ] && ls "$top"/conf/*.ini | sed "s|^|$t |"
done >"$tmp/inputs"

echo "1..$(($(wc -l <"$tmp/inputs") + 1))"
n=0
while read -r t f; do
    n=$((n + 1))
    if "$build/$t" "$f" >"$tmp/out" 2>&1; then
        echo "ok $n - $t: ${f#"$top"/}"
    else
        echo "not ok $n - $t: ${f#"$top"/}"
        sed 's/^/# /' "$tmp/out"
    fi
done <"$tmp/inputs"

n=$((n + 1))
if "$build/make_seeds" "$tmp/seeds" >"$tmp/out" 2>&1 &&
   diff -r "$tmp/seeds" "$fz/corpus" >>"$tmp/out" 2>&1; then
    echo "ok $n - the committed seed corpus is what make_seeds writes"
else
    echo "not ok $n - the committed seed corpus is what make_seeds writes" \
         "(make fuzz-seeds rewrites it)"
    sed 's/^/# /' "$tmp/out" | head -40
fi
