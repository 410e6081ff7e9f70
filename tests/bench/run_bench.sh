#!/bin/sh
# Runs psbench (built by `make bench`) against BUILD/psd, writes
# BUILD/bench.csv and BUILD/bench.json, and, when gnuplot is available,
# plots throughput against payload size to BUILD/bench.png.
# Usage: sh tests/bench/run_bench.sh BUILD
# Environment: PSBENCH_ARGS  extra psbench arguments (e.g. "--ms 1000")
#              PSD_BENCH_PLOT=1  install gnuplot-nox when it is missing
set -u
BUILD=${1:-build}

for f in "$BUILD/psbench" "$BUILD/psd"; do
    if [ ! -x "$f" ]; then
        echo "run_bench: $f is missing; run \`make bench\`" >&2
        exit 1
    fi
done

# shellcheck disable=SC2086  # PSBENCH_ARGS is a list of words on purpose
"$BUILD/psbench" --psd "$BUILD/psd" --out "$BUILD" ${PSBENCH_ARGS:-}
rc=$?

if ! command -v gnuplot >/dev/null 2>&1 && [ "${PSD_BENCH_PLOT:-0}" = 1 ]; then
    SUDO=
    [ "$(id -u)" = 0 ] || SUDO=sudo
    echo "run_bench: PSD_BENCH_PLOT=1: installing gnuplot-nox with" \
         "${SUDO:+sudo }apt-get"
    $SUDO apt-get update -qq &&
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            gnuplot-nox >/dev/null ||
        echo "run_bench: could not install gnuplot-nox" >&2
fi

csv="$BUILD/bench.csv"
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "run_bench: no gnuplot, no plot" \
         "(PSD_BENCH_PLOT=1 make bench installs gnuplot-nox)"
    exit $rc
fi
if [ ! -s "$csv" ]; then
    echo "run_bench: $csv is empty, no plot" >&2
    exit $rc
fi

# One data file per op and in-flight depth: dense cells, 1 node, 1 worker,
# unpinned, that completed without errors; columns payload_bytes and GB/s.
# The CSV's columns are listed in tests/bench/README.md.
dat=$(mktemp -d /tmp/psbench-plot-XXXXXX)
trap 'rm -rf "$dat"' EXIT
plot=""
lc=0
for op in push pull pushpull push_range pull_range; do
    lc=$((lc + 1))
    for win in 1 64; do
        awk -F, -v op="$op" -v win="$win" \
            '$1 == "cell" && $3 == op && $7 == win && $8 == 1 && $9 == 1 &&
             $10 == 0 && ($4 == "d1" || $4 == "d1k") && $11 > 0 && $20 == 0 {
                 print $5, $13 }' \
            "$csv" | sort -n > "$dat/$op-$win.dat"
        [ -s "$dat/$op-$win.dat" ] || continue
        style="linespoints lc $lc lw 2"
        [ "$win" = 64 ] && style="linespoints lc $lc dt 2 lw 1"
        plot="$plot${plot:+, }'$dat/$op-$win.dat' using 1:2 with $style title '$op, $win in flight'"
    done
done
tcp=$(awk -F, '$1 == "baseline" && $2 == "tcp_stream" && $10 == 0 {
                   printf "%.2f", $13 }' "$csv")
if [ -n "$tcp" ] && [ "$tcp" != "0.00" ]; then
    plot="$plot, $tcp with lines lw 2 lc rgb 'black' title 'raw TCP stream ($tcp GB/s)'"
fi
if [ -z "$plot" ]; then
    echo "run_bench: no dense cells in $csv, no plot"
    exit $rc
fi
term=pngcairo
gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo || term=png
gnuplot <<EOF || { echo "run_bench: gnuplot failed" >&2; exit $rc; }
set terminal $term size 1000,620 noenhanced
set output '$BUILD/bench.png'
set title 'psd: throughput against payload size (1 node, 1 worker, unpinned)'
set logscale x 2
set xlabel 'payload per request (bytes of floats)'
set ylabel 'GB/s of float payload (log)'
set key right bottom
set grid
set logscale y 10
set xrange [2:33554432]
set yrange [0.00005:*]
set xtics ("4 B" 4, "64 B" 64, "1 KiB" 1024, "4 KiB" 4096, "64 KiB" 65536, "1 MiB" 1048576, "16 MiB" 16777216)
plot $plot
EOF
echo "run_bench: plot written to $BUILD/bench.png"
exit $rc
