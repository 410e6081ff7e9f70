#!/bin/sh
# `make bench`: builds ps-lite's benchmark from the optional harness folder
# (tests/bench/pslite.sh), runs psbench against BUILD/psd and, alternately
# on the same cells, ps-lite, then plots throughput against payload size
# for psd, ps-lite and raw TCP to BUILD/bench.png. psbench writes
# BUILD/bench.csv, bench.json, side_by_side.csv and side_by_side.json.
# Usage: sh tests/bench/run_bench.sh BUILD
# Environment: BENCH_QUICK=1     baselines, split cells and the side-by-side table only
#              BENCH_ROUNDS=N    side-by-side rounds, each figure the median
#                                (default 3; 1 with BENCH_QUICK=1)
#              PSBENCH_ARGS      extra psbench arguments (e.g. "--ms 1000")
#              PSLITE_HARNESS    the ps-lite harness folder (see pslite.sh);
#                                empty: psd alone
#              PSD_BENCH_PLOT=0  no plot, and no apt-get install of gnuplot
set -u
BUILD=${1:-build}
here=$(dirname "$0")

for f in "$BUILD/psbench" "$BUILD/psd"; do
    if [ ! -x "$f" ]; then
        echo "run_bench: $f is missing; run \`make bench\`" >&2
        exit 1
    fi
done

# Installs and builds come first, so that nothing of the kind runs while
# figures are measured.
if ! command -v gnuplot >/dev/null 2>&1 && [ "${PSD_BENCH_PLOT:-1}" != 0 ]; then
    SUDO=
    [ "$(id -u)" = 0 ] || SUDO=sudo
    echo "run_bench: installing gnuplot-nox with ${SUDO:+sudo }apt-get for" \
         "the plot (PSD_BENCH_PLOT=0 to skip)"
    { $SUDO apt-get update -qq &&
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
          gnuplot-nox; } >/dev/null 2>&1 ||
        echo "run_bench: could not install gnuplot-nox; no plot" >&2
fi

set --
if psl=$(sh "$here/pslite.sh" "$BUILD" | tail -n 1) && [ -x "$psl" ]; then
    set -- --pslite "$psl"
else
    echo "run_bench: ps-lite not available (see above): psd alone"
fi
[ "${BENCH_QUICK:-0}" = 1 ] && set -- "$@" --no-matrix --no-memory
# One round of a cell swings by a tenth or more on a shared VM (ps-lite's
# 16 MiB push: 2.9 and 3.6 GB/s in two runs of the same commit); the
# median of three alternating rounds is what the ratios are read from.
rounds=${BENCH_ROUNDS:-}
[ -n "$rounds" ] || { [ "${BENCH_QUICK:-0}" = 1 ] && rounds=1 || rounds=3; }
set -- "$@" --rounds "$rounds"

# No figure, table or plot of an earlier run may pass for this one's.
rm -f "$BUILD/bench.csv" "$BUILD/bench.json" "$BUILD/side_by_side.csv" \
      "$BUILD/side_by_side.json" "$BUILD/bench.png"
# shellcheck disable=SC2086  # PSBENCH_ARGS is a list of words on purpose
"$BUILD/psbench" --psd "$BUILD/psd" --out "$BUILD" "$@" ${PSBENCH_ARGS:-}
rc=$?

[ "${PSD_BENCH_PLOT:-1}" = 0 ] && exit $rc
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "run_bench: no gnuplot, no plot"
    exit $rc
fi
sbs="$BUILD/side_by_side.csv"
csv="$BUILD/bench.csv"
if [ ! -s "$sbs" ]; then
    echo "run_bench: $sbs is missing or empty, no plot" >&2
    exit $rc
fi

# One data file per system and op: the side-by-side cells with 1 request in
# flight and one key per ps-lite request (not 65536x1), columns
# payload_bytes and GB/s; raw TCP from bench.csv's baselines: the
# request/response at the same sizes and the stream. The columns of both
# files are listed in tests/bench/README.md.
dat=$(mktemp -d /tmp/psbench-plot-XXXXXX)
trap 'rm -rf "$dat"' EXIT
plot=""
for op in push pull; do
    for sys in psd pslite; do
        col=17
        [ "$sys" = pslite ] && col=16
        awk -F, -v op="$op" -v col="$col" \
            'NR > 1 && $4 == op && $5 == 1 && $2 !~ /x/ && $col != "" &&
             !seen[$1]++ { print $3, $col }' "$sbs" | sort -n >"$dat/$sys-$op.dat"
        [ -s "$dat/$sys-$op.dat" ] || continue
        if [ "$sys" = psd ]; then
            style="lc rgb '#1f60c0' lw 2 pt 7"
            name=psd
        else
            style="lc rgb '#d04020' lw 2 pt 5"
            name=ps-lite
        fi
        [ "$op" = pull ] && style="$style dt 2"
        plot="$plot${plot:+, }'$dat/$sys-$op.dat' using 1:2 with linespoints $style title '$name $op'"
    done
done
if [ -s "$csv" ]; then
    awk -F, '$1 == "baseline" && $2 == "tcp_rr" && $13 != "" { print $5, $13 }' \
        "$csv" | sort -n >"$dat/tcp-rr.dat"
    [ -s "$dat/tcp-rr.dat" ] &&
        plot="$plot${plot:+, }'$dat/tcp-rr.dat' using 1:2 with linespoints lc rgb 'black' lw 2 pt 13 title 'raw TCP: N bytes, 64 B back, 1 at a time'"
    tcp=$(awk -F, '$1 == "baseline" && $2 == "tcp_stream" && $10 == 0 {
                       printf "%.2f", $13 }' "$csv")
    if [ -n "$tcp" ] && [ "$tcp" != "0.00" ]; then
        plot="$plot${plot:+, }$tcp with lines lw 1 lc rgb 'gray40' dt 3 title 'raw TCP stream ($tcp GB/s)'"
    fi
fi
if [ -z "$plot" ]; then
    echo "run_bench: no 1-in-flight cells in $sbs, no plot"
    exit $rc
fi
term=pngcairo
gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo || term=png
gnuplot <<EOF || { echo "run_bench: gnuplot failed" >&2; exit $rc; }
set terminal $term size 1000,620 noenhanced
set output '$BUILD/bench.png'
set title "Throughput against payload size, 1 request in flight, loopback (one run of make bench)"
set logscale x 2
set xlabel 'payload per request (bytes of floats)'
set ylabel 'GB/s of float payload (log)'
set key right bottom
set grid
set logscale y 10
set xrange [2:33554432]
set yrange [0.00001:20]
set format y '%g'
set xtics ("4 B" 4, "64 B" 64, "1 KiB" 1024, "4 KiB" 4096, "64 KiB" 65536, "1 MiB" 1048576, "16 MiB" 16777216)
plot $plot
EOF
echo "run_bench: plot written to $BUILD/bench.png"
exit $rc
