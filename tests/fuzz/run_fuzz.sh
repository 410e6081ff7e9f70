#!/bin/sh
# Runs libFuzzer targets built by `make fuzz-build`, one after the other,
# each for SECONDS from a scratch copy of its seed corpus and regression
# inputs (the repository is never written), and prints per target its
# runs, speed, coverage and whether it found anything. A finding leaves
# its reproducer under FUZZ_BUILD/run/TARGET/ and makes the exit status 1.
# Usage: tests/fuzz/run_fuzz.sh FUZZ_BUILD SECONDS TARGET[:SECONDS]...
# (TARGET:SECONDS runs that target for its own time).
# Extra libFuzzer flags: FUZZ_FLAGS (e.g. FUZZ_FLAGS=-use_value_profile=1).
B=${1:?usage: run_fuzz.sh FUZZ_BUILD SECONDS TARGET...}
secs=${2:?usage: run_fuzz.sh FUZZ_BUILD SECONDS TARGET...}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
B=$(cd "$B" && pwd)

# One allocation above 64 MB, or more than 512 MB resident, is a finding:
# no input of these sizes has a reason to need that. So is an input that
# takes more than 5 s.
limits="-malloc_limit_mb=64 -rss_limit_mb=512 -timeout=5"
# Report every run's leaks and UBSan's stacks; keep going is libFuzzer's
# job, not the sanitizers'.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1"

found=0
printf '%-13s %10s %8s %6s %7s %7s %6s  %s\n' target runs exec/s cov ft \
    corpus rss result
for t in "$@"; do
    dict=
    tsecs=$secs
    case $t in
    *:*) tsecs=${t#*:}; t=${t%%:*} ;;
    esac
    case $t in
    fuzz_frame)   maxlen=16384 ;;    # several frames, past the 4 KiB limit
    fuzz_msg)     maxlen=8192 ;;     # keys past PSW_REF_MIN are referenced
    # conf/*.ini without their comments fit (4,239 bytes the largest).
    fuzz_config)  maxlen=8192; dict=$here/fuzz_config.dict ;;
    fuzz_request) maxlen=8192 ;;     # two frames of the fixed max_frame
    fuzz_snapshot) maxlen=16384 ;;   # the seeds are 9-10 KB
    fuzz_journal) maxlen=16384 ;;    # two records of the largest size
    *) echo "run_fuzz.sh: unknown target $t" >&2; exit 2 ;;
    esac
    work=$B/run/$t
    rm -rf "$work"
    mkdir -p "$work/corpus" "$work/artifacts"
    for d in "$here/corpus/$t" "$here/regressions/$t"; do
        [ -d "$d" ] && find "$d" -type f ! -name README.md \
            -exec cp {} "$work/corpus/" \;
    done
    if [ "$t" = fuzz_config ]; then
        # Whole, and without their comments: libFuzzer reads an input
        # only up to maxlen, and conf/psd.ini's 29 KB of notes kept all
        # but its first settings out of reach (a review).
        for f in "$top"/conf/*.ini; do
            cp "$f" "$work/corpus/conf-${f##*/}"
            grep -v -E '^[[:space:]]*([#;]|$)' "$f" \
                >"$work/corpus/conf-settings-${f##*/}"
        done
    fi
    # shellcheck disable=SC2086  # word splitting of the flag lists is meant
    "$B/$t" "$work/corpus" -max_total_time="$tsecs" -max_len=$maxlen $limits \
        -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
        ${dict:+-dict="$dict"} ${FUZZ_FLAGS:-} >"$work/log" 2>&1
    rc=$?
    stat() { sed -n "s/^stat::$1: *//p" "$work/log" | tail -1; }
    last=$(grep -E '^#[0-9]+' "$work/log" | tail -1)
    field() { printf '%s\n' "$last" | sed -n "s/.* $1: *\([0-9]*\).*/\1/p"; }
    corp=$(printf '%s\n' "$last" | sed -n 's/.* corp: *\([0-9]*\)\/.*/\1/p')
    repro=$(find "$work/artifacts" -type f ! -name 'slow-unit-*' | head -1)
    if [ "$rc" -ne 0 ] || [ -n "$repro" ]; then
        found=1
        result="FOUND (exit $rc): ${repro:-no reproducer written};"
        result="$result log $work/log"
    else
        result=clean
    fi
    printf '%-13s %10s %8s %6s %7s %7s %4sMB  %s\n' "$t" \
        "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
        "$(field cov)" "$(field ft)" "$corp" "$(stat peak_rss_mb)" "$result"
    # A finding's reason and where it happened, so that a run whose
    # tree is gone (a CI machine's) still says what broke.
    if [ "$found" -ne 0 ] && [ "$result" != clean ]; then
        grep -m1 -E 'ERROR: |runtime error|fuzz check failed|deadly signal' \
            "$work/log" | sed 's/^/    /'
        grep -E '^ *#[0-9]+ 0x' "$work/log" | head -12 | sed 's/^/    /'
        [ -n "$repro" ] &&
            printf '    input (%s bytes; base64 of the first 3072): %s\n' \
                "$(wc -c <"$repro" | tr -d ' ')" \
                "$(head -c 3072 "$repro" | base64 -w0)"
    fi
done
if [ "$found" -ne 0 ]; then
    echo "fuzz: findings above. Replay one with FUZZ_BUILD/TARGET FILE," \
         "shrink it with -minimize_crash=1, and once fixed keep it in" \
         "tests/fuzz/regressions/TARGET/"
fi
exit "$found"
