#!/bin/sh
# Fetches the Reuters-21578 "Grain" data for examples/reuters_lr into DIR:
# downloads Debian's weka package with `apt-get download` (no root needed,
# nothing is installed), unpacks only ReutersGrain-train.arff and
# ReutersGrain-test.arff from it, then deletes the package. When the
# download fails, apt's package lists may be missing or stale: it then runs
# `apt-get update` once (through sudo when not root) and tries again.
# Reuters-21578 may be used for research only: keep it out of the
# repository. Usage: fetch_reuters.sh DIR
set -u

DIR=${1:?usage: fetch_reuters.sh DIR}
PROG=fetch_reuters
FILES="ReutersGrain-train.arff ReutersGrain-test.arff"
# The files of weka 3.6.14-3 (Debian 12). Another version may ship other
# bytes; that is reported, and the figures in README.md may then differ.
TRAIN_SUM=87abc5c45221a5027329912a1ed85d670edf338e696a2a2744893ae71cc2ae1b
TEST_SUM=957e519ba6094b5e1f5aaf0ab4c0829052c8c9b5fd3c586834ddbef77f704cea

say() { printf '%s: %s\n' "$PROG" "$*"; }
fail() { printf '%s: FAIL: %s\n' "$PROG" "$*" >&2; exit 1; }

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

mkdir -p "$DIR" || fail "cannot create $DIR"
TMP=$(mktemp -d "$DIR/.fetch.XXXXXX") || fail "cannot create a folder in $DIR"
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# apt-get download writes into the current folder. As root it warns that
# the download runs unsandboxed; that is harmless.
if ! (cd "$TMP" && apt-get download -q weka); then
    say "apt-get download weka failed; updating apt's package lists" \
        "(${SUDO:+sudo }apt-get update) and trying again"
    OFFLINE="(offline? copy ReutersGrain-train.arff and ReutersGrain-test.arff
from Debian's weka package, usr/share/doc/weka/examples, into $DIR)"
    $SUDO apt-get update -qq || fail "apt-get update failed $OFFLINE"
    (cd "$TMP" && apt-get download -q weka) ||
        fail "cannot download Debian's weka package $OFFLINE"
fi
deb=""
for f in "$TMP"/weka_*_all.deb; do
    [ -f "$f" ] && deb=$f
done
[ -n "$deb" ] || fail "apt-get download left no weka_*_all.deb"

SRC=usr/share/doc/weka/examples
dpkg-deb --fsys-tarfile "$deb" |
    (cd "$TMP" && tar -x --wildcards "./$SRC/ReutersGrain-*") ||
    fail "cannot unpack the ARFF files from $deb"
for f in $FILES; do
    [ -s "$TMP/$SRC/$f" ] || fail "$deb has no $f"
done
if (cd "$TMP/$SRC" &&
    printf '%s  %s\n%s  %s\n' "$TRAIN_SUM" ReutersGrain-train.arff \
        "$TEST_SUM" ReutersGrain-test.arff | sha256sum -c --quiet -); then
    say "sha256 of both files as expected (weka 3.6.14-3)"
else
    say "WARNING: the files differ from weka 3.6.14-3's; figures may differ"
fi
for f in $FILES; do
    mv "$TMP/$SRC/$f" "$DIR/$f" ||
        fail "cannot move $f into $DIR"
done
say "$DIR: $FILES (from $(basename "$deb"))"
