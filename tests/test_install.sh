#!/bin/sh
# Installs into a staging directory (make install DESTDIR=...), builds a
# trainer with nothing but `pkg-config --cflags --libs psclient`, and runs
# it against the installed psd; then imports the installed Python package
# with nothing but PYTHONPATH and uses it. Reports in TAP like the C tests.
# Usage: tests/test_install.sh BUILD_DIR   (SAN: sanitizer flags, if any)
BUILD=${1:?usage: tests/test_install.sh BUILD_DIR}
top=$(cd "$(dirname "$0")/.." && pwd)
stage=$(mktemp -d /tmp/psd-install-XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$stage"
}
trap cleanup EXIT INT TERM

echo "1..13"
n=0
check() {       # check DESCRIPTION COMMAND...
    n=$((n + 1)); d=$1; shift
    if "$@" >"$stage/out" 2>&1; then echo "ok $n - $d"
    else echo "not ok $n - $d"; sed 's/^/# /' "$stage/out"; fi
}

prefix=/usr/local
check "make install into DESTDIR puts psd, the header, the libraries and psclient.pc in place" \
    sh -c "make -s -C '$top' BUILD='$BUILD' DESTDIR='$stage/root' PREFIX=$prefix install >/dev/null &&
           test -x '$stage/root$prefix/bin/psd' && test -x '$stage/root$prefix/bin/psctl' &&
           test -f '$stage/root$prefix/lib/systemd/system/psd.service' &&
           test -f '$stage/root$prefix/include/psclient.h' &&
           test -f '$stage/root$prefix/lib/libpsclient.a' &&
           test -f '$stage/root$prefix/lib/pkgconfig/psclient.pc' &&
           readelf -d '$stage/root$prefix/lib/libpsclient.so' | grep -q 'SONAME.*libpsclient.so.0]' &&
           test \$(stat -L -c %a '$stage/root$prefix/lib/libpsclient.so') = 644"

pc="pkg-config --define-variable=prefix=$stage/root$prefix"
export PKG_CONFIG_PATH="$stage/root$prefix/lib/pkgconfig"
check "a trainer compiles and links with only pkg-config --cflags --libs psclient" \
    sh -c "${CC:-cc} ${SAN:-} -o '$stage/trainer' '$top/tests/install/trainer.c' \$($pc --cflags --libs psclient)"

# A machine with libpsclient but without its dependencies' -dev packages
# (their .pc files): psclient.pc named them in Requires.private, which
# pkg-config resolves for every query, and the line above failed there.
only="$stage/pconly"
mkdir -p "$only" && cp "$stage/root$prefix/lib/pkgconfig/psclient.pc" "$only/"
check "pkg-config --cflags --libs psclient needs no other .pc file" \
    sh -c "PKG_CONFIG_LIBDIR='$only' PKG_CONFIG_PATH= $pc --cflags --libs psclient"
check "a trainer links libpsclient.a with pkg-config --static" \
    sh -c "${CC:-cc} ${SAN:-} -o '$stage/trainer-static' '$top/tests/install/trainer.c' \
           \$($pc --cflags psclient) '$stage/root$prefix/lib/libpsclient.a' \
           \$($pc --static --libs psclient | sed 's/-lpsclient//') &&
           ! ldd '$stage/trainer-static' | grep -q libpsclient"

check "the shared library exports only ps_* symbols" \
    sh -c "! nm -D --defined-only '$stage/root$prefix/lib/libpsclient.so' | awk '{print \$3}' | grep -v '^ps_' | grep ."

# A one-node cluster on a port that is free now: of this program's own
# range when tests/run.sh gives it one (PSD_TEST_PORTS=LO-HI).
case ${PSD_TEST_PORTS:-} in
[0-9]*-[0-9]*) port=$((${PSD_TEST_PORTS%-*} + $$ % 100)) ;;
*) port=$((20000 + $$ % 20000)) ;;
esac
ok=0
for try in 1 2 3 4 5; do
    cat >"$stage/c.ini" <<INI
[cluster]
nodes = 127.0.0.1:$port
shards = 4
[server]
data_dir = $stage/data
[table.w]
kind = sparse
dim = 1
updater = sum
INI
    "$stage/root$prefix/bin/psd" -c "$stage/c.ini" 2>"$stage/psd.log" &
    pid=$!
    for i in $(seq 1 100); do
        grep -q listening "$stage/psd.log" && { ok=1; break; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    [ $ok = 1 ] && break
    # Not listening within 5 s (a taken port ends it; a slow start not).
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=; port=$((port + 1))
done
check "the installed trainer pushes to and pulls from the installed psd" \
    env LD_LIBRARY_PATH="$stage/root$prefix/lib" "$stage/trainer" "127.0.0.1:$port"

# The Python package finds the library installed with it through its
# _config.py (a path relative to the package), so the staged copy is found
# without PSCLIENT_LIB or LD_LIBRARY_PATH; both are unset to prove it.
pydir="$stage/root$prefix/lib/python3/dist-packages"
check "make install puts the Python package in lib/python3/dist-packages" \
    test -f "$pydir/psclient/__init__.py" -a -f "$pydir/psclient/_lib.py" -a \
         -f "$pydir/psclient/_config.py"
pyrun() {       # pyrun PYTHON-CODE: /usr/bin/python3 on the staged package
    (cd "$stage" && case ${SAN:-} in
     *address*) export LD_PRELOAD="$(${CC:-cc} -print-file-name=libasan.so)" \
                       ASAN_OPTIONS=detect_leaks=0 ;;
     *thread*) rt=$(${CC:-cc} -print-file-name=libclang_rt.tsan-x86_64.so)
               [ -f "$rt" ] || rt=$(${CC:-cc} -print-file-name=libtsan.so)
               export LD_PRELOAD="$rt" ;;
     esac
     env -u PSCLIENT_LIB -u LD_LIBRARY_PATH PYTHONPATH="$pydir" \
         PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c "$1")
}
# /usr/bin/python3 does not start at all with clang's ThreadSanitizer
# runtime preloaded (make tsan: a segmentation fault before main); the
# Python checks say so and skip there.
py_skip=
case ${SAN:-} in
*thread*) pyrun pass >/dev/null 2>&1 ||
    py_skip="python3 does not start with the ThreadSanitizer runtime preloaded" ;;
esac
pycheck() {     # pycheck DESCRIPTION PYTHON-CODE
    if [ -n "$py_skip" ]; then n=$((n + 1)); echo "ok $n - $1 # SKIP $py_skip"
    else check "$1" pyrun "$2"; fi
}
pycheck "python3 imports the installed psclient with PYTHONPATH alone, loading the installed library" \
    "import psclient, os
assert os.path.samefile(psclient.library_path,
                        '$stage/root$prefix/lib/libpsclient.so.0'), psclient.library_path"
pycheck "the installed Python binding pushes to and pulls from the installed psd" \
    "import numpy as np, psclient
with psclient.connect('127.0.0.1:$port') as c:
    t = c.table('w')
    k = np.array([1, 2, 3], np.uint64)
    t.push(k, np.ones(3, np.float32))
    got = t.pull(k)
    assert (got == 1).all(), got"

check "the installed psctl reaches the installed psd" \
    sh -c "'$stage/root$prefix/bin/psctl' -s 127.0.0.1:$port ping | grep -q 'pong from node 0'"

# A later `make install PREFIX=X` (after a plain `make`) writes X into
# psclient.pc and the unit, and systemd accepts the unit as it is.
other="$stage/other"
check "make install PREFIX=X writes a psclient.pc whose prefix is X" \
    sh -c "make -s -C '$top' BUILD='$BUILD' PREFIX='$other' install >/dev/null &&
           grep -qx 'prefix=$other' '$other/lib/pkgconfig/psclient.pc' &&
           test \"\$(pkg-config --variable=prefix '$other/lib/pkgconfig/psclient.pc')\" = '$other'"
check "the installed unit names X/bin/psd and passes systemd-analyze verify with no output" \
    sh -c "grep -q '^ExecStart=$other/bin/psd -c' '$other/lib/systemd/system/psd.service' &&
           if command -v systemd-analyze >/dev/null; then
               out=\$(systemd-analyze verify '$other/lib/systemd/system/psd.service' 2>&1) &&
               test -z \"\$out\" || { echo \"\$out\"; exit 1; }
           fi"

# Under root's strict umask (sudo keeps it) every file is readable by all:
# psclient.pc and _config.py, written through the shell, were 0600, and
# pkg-config and `import psclient` failed for everyone else. A backup
# beside the library (not a release's file) is left alone.
strict="$stage/strict"
mkdir -p "$strict$prefix/lib"
touch "$strict$prefix/lib/libpsclient.so.0.4.5.bak" "$strict$prefix/lib/libpsclient.so.0.0.1"
check "make install under umask 077 writes every file readable, removes an earlier release's library and keeps a backup" \
    sh -c "(umask 077; make -s -C '$top' BUILD='$BUILD' DESTDIR='$strict' PREFIX=$prefix install >/dev/null) &&
           closed=\$(find '$strict' ! -perm -444) && test -z \"\$closed\" &&
           test -f '$strict$prefix/lib/libpsclient.so.0.4.5.bak' &&
           test ! -e '$strict$prefix/lib/libpsclient.so.0.0.1' ||
           { echo \"not readable by all: \$closed\"; ls -l '$strict$prefix/lib'; exit 1; }"
rm -rf "$strict"

# make uninstall takes back what make install put, and an earlier
# release's library (libpsclient.so.0.X.Y) that an upgrade left.
touch "$stage/root$prefix/lib/libpsclient.so.0.0.1"
check "make uninstall leaves nothing of psd in the stage" \
    sh -c "make -s -C '$top' BUILD='$BUILD' DESTDIR='$stage/root' PREFIX=$prefix uninstall >/dev/null &&
           left=\$(find '$stage/root' -type f -o -type l) && test -z \"\$left\" ||
           { echo \"left: \$left\"; exit 1; }"
