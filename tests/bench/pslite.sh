#!/bin/sh
# Builds ps-lite's benchmark, psl_bench, for `make bench` from an optional
# folder outside the repository (the ps-lite harness: a ps-lite source
# tarball, build.sh and psl_bench.cc; see tests/bench/README.md), and prints
# the path of the program to run on its last line. Exits 1, after saying
# why on stderr, when there is no harness or the build fails: the bench then
# measures psd alone.
# Usage: sh tests/bench/pslite.sh BUILD
# Environment: PSLITE_HARNESS  the harness folder (default
#              ../shared/anchors/pslite next to the repository, or next to
#              its main checkout when this is a git worktree); set it empty
#              to leave ps-lite out.
#
# The harness's build.sh extracts and builds ps-lite into BUILD/pslite
# (installing libzmq3-dev, libprotobuf-dev, protobuf-compiler, cmake and g++
# with apt-get when missing) and compiles psl_bench there. psl_bench has
# fixed cells (a-e); for the plot's payload sizes this script compiles a
# second program, BUILD/pslite/psl_bench_cells, from a copy of
# psl_bench.cc with three more cell lines (f, g, h below) and nothing else
# changed. When the copy cannot be made the plain psl_bench is used.
set -u
BUILD=${1:?usage: tests/bench/pslite.sh BUILD}
REPO=$(cd "$(dirname "$0")/../.." && pwd)

if [ "${PSLITE_HARNESS+set}" = set ]; then
    HARNESS=$PSLITE_HARNESS
    if [ -z "$HARNESS" ]; then
        echo "pslite: PSLITE_HARNESS is empty: ps-lite left out" >&2
        exit 1
    fi
else
    HARNESS=$REPO/../shared/anchors/pslite
    if [ ! -d "$HARNESS" ]; then
        common=$(git -C "$REPO" rev-parse --path-format=absolute \
                     --git-common-dir 2>/dev/null) &&
            [ -d "$(dirname "$common")/../shared/anchors/pslite" ] &&
            HARNESS=$(dirname "$common")/../shared/anchors/pslite
    fi
fi
if [ ! -x "$HARNESS/build.sh" ] || [ ! -f "$HARNESS/psl_bench.cc" ]; then
    echo "pslite: no ps-lite harness at $HARNESS (build.sh, psl_bench.cc);" \
         "set PSLITE_HARNESS=DIR to compare with ps-lite" >&2
    exit 1
fi
HARNESS=$(cd "$HARNESS" && pwd)

OUT=$BUILD/pslite
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
# build.sh reports progress (and any apt-get install) on stderr, which goes
# through; its stdout ends with the source and library paths and psl_bench.
if ! "$HARNESS/build.sh" "$OUT" >"$OUT/build-out.log"; then
    echo "pslite: $HARNESS/build.sh failed" >&2
    exit 1
fi
PSL=$(tail -n 1 "$OUT/build-out.log")
SRC=$(sed -n 's/^build\.sh: ps-lite [^ ]* from //p' "$OUT/build-out.log")
LIB=$(sed -n 's/^build\.sh: library //p' "$OUT/build-out.log")
if [ ! -x "$PSL" ]; then
    echo "pslite: build.sh did not name psl_bench" >&2
    exit 1
fi
echo "pslite: ps-lite $(sed -n 's/^build\.sh: ps-lite \([^ ]*\) from .*/\1/p' \
      "$OUT/build-out.log") built in $OUT (harness $HARNESS)" >&2

# The extra cells, in psl_bench's CellDef form: id, label, keys per
# request, floats per key, key sets, in flight, ops. One wide key per
# request, as psl_bench's cells b-d; psd's cells of these sizes are 1, 16
# and 256 rows of 1024 floats (f: 1 row of 1 float).
CELLS='    {"f", "4B", 1, 1, 16, 1, {"push", "pull", "pushpull"}},
    {"g", "64KiB", 1, 16384, 16, 1, {"push", "pull", "pushpull"}},
    {"h", "1MiB", 1, 262144, 16, 1, {"push", "pull", "pushpull"}},'
anchor='^ *{"e", "65536x1",'
if ! grep -q "$anchor" "$HARNESS/psl_bench.cc" ||
   grep -q '^ *{"[fgh]",' "$HARNESS/psl_bench.cc" ||
   [ ! -f "$LIB" ] || [ ! -d "$SRC/include" ]; then
    echo "pslite: psl_bench.cc does not have the expected cell table;" \
         "using its own cells only" >&2
    echo "$PSL"
    exit 0
fi
tmp=$OUT/psl_bench_cells.cc.tmp
awk -v cells="$CELLS" -v anchor="$anchor" \
    '{ print } $0 ~ anchor { print cells }' "$HARNESS/psl_bench.cc" >"$tmp"
if ! cmp -s "$tmp" "$OUT/psl_bench_cells.cc"; then
    mv "$tmp" "$OUT/psl_bench_cells.cc"
else
    rm -f "$tmp"
fi
EXT=$OUT/psl_bench_cells
if [ ! -x "$EXT" ] ||
   [ -n "$(find "$OUT/psl_bench_cells.cc" "$LIB" -newer "$EXT")" ]; then
    echo "pslite: compiling psl_bench_cells (psl_bench + cells f, g, h)" >&2
    # The flags of the harness's build.sh for psl_bench.
    if ! g++ -O3 -std=c++11 -I"$SRC/include" -I"$(dirname "$LIB")" \
            -o "$EXT.tmp" "$OUT/psl_bench_cells.cc" "$LIB" -lzmq -lprotobuf \
            -lpthread 2>"$OUT/psl_bench_cells-build.log"; then
        cat "$OUT/psl_bench_cells-build.log" >&2
        echo "pslite: could not compile psl_bench_cells; using psl_bench" >&2
        echo "$PSL"
        exit 0
    fi
    mv "$EXT.tmp" "$EXT"
fi
echo "$EXT"
