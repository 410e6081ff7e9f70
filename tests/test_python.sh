#!/bin/sh
# Runs the Python binding's tests (tests/python, pytest) with Debian's
# /usr/bin/python3, numpy and pytest, against the build tree's libpsclient
# and psd, and reports every test as a TAP line for tests/run.sh. pytest's
# own output follows as TAP comments.
# Usage: tests/test_python.sh BUILD_DIR   (SAN: sanitizer flags, if any)
BUILD=${1:?usage: tests/test_python.sh BUILD_DIR}
PYTHON=/usr/bin/python3
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$BUILD" && pwd)
tmp=$(mktemp -d /tmp/psd-pytest-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM

export PSD_BIN="${PSD_BIN:-$build/psd}" PSD_SRC_DIR="$top"
export PSCLIENT_LIB="$build/libpsclient.so.0"
export PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1          # no __pycache__ in the source tree
case ${SAN:-} in
*address*)
    # An ASan-built library needs the ASan runtime loaded first; Python's
    # own allocations are not ours to leak-check.
    LD_PRELOAD=$(${CC:-cc} -print-file-name=libasan.so)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export LD_PRELOAD ASAN_OPTIONS ;;
*thread*)
    # A TSan-built library needs its runtime loaded first too (its
    # thread-local state cannot be added to a running interpreter):
    # clang's shared runtime (make tsan), else GCC's.
    LD_PRELOAD=$(${CC:-cc} -print-file-name=libclang_rt.tsan-x86_64.so)
    [ -f "$LD_PRELOAD" ] || LD_PRELOAD=$(${CC:-cc} -print-file-name=libtsan.so)
    export LD_PRELOAD
    # /usr/bin/python3 does not start at all with clang's runtime
    # preloaded (make tsan: a segmentation fault before main).
    if ! "$PYTHON" -c pass >/dev/null 2>&1; then
        echo "1..1"
        echo "ok 1 - python # SKIP $PYTHON does not start with" \
             "$LD_PRELOAD preloaded"
        exit 0
    fi ;;
esac

(cd "$top/tests/python" && "$PYTHON" -m pytest -q -rfE -p no:cacheprovider \
    --junitxml="$tmp/junit.xml" .) >"$tmp/out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/out"
# One TAP line per test case of the JUnit report.
env -u LD_PRELOAD "$PYTHON" - "$tmp/junit.xml" <<'EOF' || exit 1
import sys
import xml.etree.ElementTree as ET
cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
print(f"1..{len(cases)}")
for n, case in enumerate(cases, 1):
    name = case.get("name")
    bad = [e for e in case if e.tag in ("failure", "error")]
    skip = [e for e in case if e.tag == "skipped"]
    if bad:
        print(f"not ok {n} - python: {name}")
        for e in bad:
            msg = " ".join(e.get("message", "").split())
            print(f"# {e.tag}: {msg}")
    elif skip:
        print(f"ok {n} - python: {name} # SKIP {skip[0].get('message', '')}")
    else:
        print(f"ok {n} - python: {name}")
EOF
exit $rc
