#!/bin/sh
# What a first-time user meets in examples/ and conf/: the trainers' --help
# and their errors for bad arguments, torch_fashion.py without PyTorch, the
# demo clusters of conf/ kept apart, and the demo scripts run from another
# folder, failing, and stopped by Ctrl-C, each leaving no psd and no
# temporary folder behind. The scripts run against stand-in trainers (tiny
# shell scripts) and real psd nodes on free ports, so this needs no data
# set and takes a few seconds. Reports in TAP like the C tests.
# Usage: tests/test_examples.sh BUILD_DIR
BUILD=${1:?usage: tests/test_examples.sh BUILD_DIR}
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$BUILD" && pwd)
PYTHON=/usr/bin/python3
tmp=$(mktemp -d /tmp/psd-examples-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

n=0
check() {       # check DESCRIPTION COMMAND...
    n=$((n + 1)); what=$1; shift
    if "$@" >"$tmp/out" 2>&1; then echo "ok $n - $what"
    else echo "not ok $n - $what"; sed 's/^/# /' "$tmp/out"; fi
}

# expect_status WANT CMD...: runs CMD with its output in $tmp/cmd.out and
# fails, showing both sides, unless it exits WANT.
expect_status() {
    want=$1; shift
    "$@" >"$tmp/cmd.out" 2>&1
    got=$?
    [ "$got" -eq "$want" ] && return 0
    echo "$*: got status $got, want $want; it printed:"
    cat "$tmp/cmd.out"
    return 1
}

# expect_output TEXT: fails unless the last command's output holds TEXT.
expect_output() {
    grep -qF -- "$1" "$tmp/cmd.out" && return 0
    echo "got no '$1' in:"
    cat "$tmp/cmd.out"
    return 1
}

# leftovers DIR: fails, listing them, if a process whose command line
# names DIR still runs, or if DIR/tmp (the scripts' TMPDIR) is not empty.
leftovers() {
    sleep 1                     # a stand-in may still be in its `sleep 1`
    left=$(pgrep -af -- "$1" | grep -v pgrep)
    if [ -n "$left" ]; then
        echo "processes left running:"
        echo "$left"
        # shellcheck disable=SC2046
        kill -KILL $(echo "$left" | cut -d' ' -f1) 2>/dev/null
        return 1
    fi
    if [ -n "$(ls -A "$1/tmp" 2>/dev/null)" ]; then
        echo "temporary files left in $1/tmp:"
        ls -A "$1/tmp"
        return 1
    fi
}

# Two distinct free ports, "P0, P1" for a nodes line, from the Python
# tests' free_port (tests/python/psdcluster.py), which never gives one
# process the same port twice in a row.
two_free_ports() {
    "$PYTHON" -c 'import sys
sys.path.insert(0, sys.argv[1])
from psdcluster import free_port
print("127.0.0.1:%d, 127.0.0.1:%d" % (free_port(), free_port()))' \
        "$top/tests/python"
}

# ---- the trainers' arguments ---------------------------------------------

examples_help() {
    for e in fashion_softmax fashion_mlp reuters_lr; do
        expect_status 0 "$build/$e" --help || return 1
        expect_output "usage: $e" || return 1
    done
}
check "every example trainer's --help prints its usage and exits 0" \
    examples_help

examples_unknown_option() {
    for e in fashion_softmax fashion_mlp reuters_lr; do
        # ARGS:UNKNOWN
        for t in "--bogus:--bogus" "--servers x --evl:--evl" \
                 "--bogus 1:--bogus"; do
            # shellcheck disable=SC2086
            expect_status 2 "$build/$e" ${t%%:*} || return 1
            expect_output "unknown option '${t#*:}'" || return 1
        done
    done
}
check "an unknown option is named as unknown (status 2), also as the last argument" \
    examples_unknown_option

examples_bad_values() {
    for e in fashion_softmax fashion_mlp reuters_lr; do
        expect_status 2 "$build/$e" || return 1
        expect_output "required" || return 1
        expect_status 2 "$build/$e" --servers x --data x --worker x \
            --workers 2 --mode bsp || return 1
        expect_output "'x' is not a number" || return 1
        expect_status 2 "$build/$e" --servers x --data x --worker 0 \
            --workers || return 1
        expect_output "--workers needs a value" || return 1
    done
}
check "missing options, a value that is not a number and an option without its value exit 2 with a message" \
    examples_bad_values

# reuters_lr forks its workers; the script behind make run-sparse stops
# it with SIGTERM (and Ctrl-C reaches none of them: a background job of sh
# ignores SIGINT), so it must take them with it.
reuters_term() {
    f=$tmp/reuters
    mkdir -p "$f" || return 1
    for s in train test; do
        {
            echo '@relation grain'
            echo '@attribute text string'
            echo '@attribute class {0,1}'
            echo '@data'
            echo "'wheat and corn prices rose',1"
            echo "'the bank raised its rates',0"
            echo "'grain exports of wheat',1"
            echo "'shares fell on the market',0"
        } >"$f/ReutersGrain-$s.arff"
    done
    {
        echo '[cluster]'
        echo "nodes = $(two_free_ports)"
        echo 'workers = 4'
        echo '[server]'
        echo "data_dir = $f/data"
        echo '[table.reuters]'
        echo 'dim = 1'
        echo 'updater = ftrl'
    } >"$f/r.ini"
    "$build/psd" -c "$f/r.ini" -n 0 >"$f/node0.log" 2>&1 &
    n0=$!
    "$build/psd" -c "$f/r.ini" -n 1 >"$f/node1.log" 2>&1 &
    n1=$!
    sleep 0.5
    "$build/reuters_lr" --servers "$f/r.ini" --data "$f" --workers 4 \
        --epochs 100000 --batch 1 >"$f/reuters_lr.log" 2>&1 &
    parent=$!
    i=0
    while [ "$(pgrep -c -P "$parent")" -lt 4 ] && [ "$i" -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kids=$(pgrep -P "$parent" | tr '\n' ' ')
    sleep 0.5                   # training now
    kill -TERM "$parent"
    wait "$parent"
    st=$?
    sleep 1
    left=""
    for k in $kids; do
        # Not a zombie that nobody has reaped yet.
        state=$(sed 's/.*) //' "/proc/$k/stat" 2>/dev/null | cut -c1)
        [ -n "$state" ] && [ "$state" != Z ] && left="$left $k"
    done
    kill -TERM "$n0" "$n1"
    wait "$n0" "$n1"
    # shellcheck disable=SC2086
    [ -n "$left" ] && kill -KILL $left
    if [ -z "$kids" ]; then
        echo "reuters_lr never forked its 4 workers:"
        cat "$f/reuters_lr.log"
        return 1
    fi
    if [ -n "$left" ]; then
        echo "workers still running a second after reuters_lr got" \
            "SIGTERM:$left (of $kids)"
        return 1
    fi
    if [ "$st" -ne 143 ]; then
        echo "reuters_lr ended with status $st after SIGTERM, want 143"
        return 1
    fi
}
check "reuters_lr stopped with SIGTERM stops the workers it forked, and dies of the signal" \
    reuters_term

# ---- torch_fashion.py without PyTorch ------------------------------------

# -S leaves out site-packages, where Debian keeps numpy and torch: this is
# what a python without them sees.
torch_missing() {
    expect_status 2 "$PYTHON" -S "$top/examples/torch_fashion.py" \
        --epochs 1 || return 1
    expect_output "python3-torch" || return 1
    expect_output "make run-torch" || return 1
    if grep -q Traceback "$tmp/cmd.out"; then
        echo "a traceback instead of a message:"
        cat "$tmp/cmd.out"
        return 1
    fi
    # Its options are read before it needs either.
    expect_status 0 "$PYTHON" -S "$top/examples/torch_fashion.py" --help ||
        return 1
    expect_output "usage: torch_fashion.py" || return 1
}
check "torch_fashion.py under a python without numpy and torch says what it needs (status 2, no traceback), and --help works there" \
    torch_missing

# ---- conf/ ---------------------------------------------------------------

# ini_get FILE SECTION KEY: the value, without its comment.
ini_get() {
    awk -v want="$2" -v key="$3" '
        /^[ \t]*\[/ { s = $0; gsub(/[][ \t\r]/, "", s); sub(/;.*/, "", s) }
        s == want && $0 ~ "^[ \t]*" key "[ \t]*=" {
            sub(/^[^=]*=[ \t]*/, ""); sub(/[ \t]*;.*/, ""); print }' "$1"
}

# Nodes of one demo that read another's snapshot refuse to start (another
# layout) or start from its weights; the scripts clear data_dir before
# they start nodes, but a user who starts them by hand, as the files say,
# must not meet either.
demos_apart() {
    seen=""
    bad=0
    for f in "$top"/conf/*.ini; do
        [ "$(basename "$f")" = psd.ini ] && continue
        dir=$(ini_get "$f" server data_dir)
        nodes=$(ini_get "$f" cluster nodes | tr -d ' ')
        for item in "data_dir=$dir" $(echo "$nodes" | tr ',' ' '); do
            other=$(printf '%s\n' "$seen" | awk -v i="$item" \
                '$1 == i { print $2; exit }')
            if [ -n "$other" ]; then
                echo "$(basename "$f") and $other share $item"
                bad=1
            fi
            seen="$seen
$item $(basename "$f")"
        done
    done
    return $bad
}
check "the demo clusters of conf/ each have their own data_dir and ports" \
    demos_apart

# ---- the demo scripts ------------------------------------------------------

# fake_build DIR KIND: a build folder with the real psd and faultproxy and
# a stand-in fashion_softmax: `ok` prints the accuracy lines the scripts
# read, `fail` exits 1, `hang` waits to be killed.
fake_build() {
    mkdir -p "$1/tmp" || return 1
    ln -sf "$build/psd" "$build/faultproxy" "$1/"
    {
        echo '#!/bin/sh'
        case $2 in
        ok)   echo 'echo "final test accuracy: 0.8500"'
              echo 'echo "test accuracy: 0.8500"' ;;
        fail) echo 'echo "stand-in trainer: failing on purpose" >&2'
              echo 'exit 1' ;;
        hang) echo 'while :; do sleep 1; done' ;;
        esac
    } >"$1/fashion_softmax"
    chmod +x "$1/fashion_softmax"
}

# demo_ini FILE DIR: a 2-node cluster on free ports with the demo's table.
demo_ini() {
    cat >"$1" <<EOF
[cluster]
nodes = $(two_free_ports)
shards = 4
workers = 2
[server]
data_dir = $2/data
[table.fashion]
kind = dense
rows = 785
dim = 10
updater = sgd
lr = 0.1
EOF
}

# The demo scripts find the nodes and the data folder in the ini as psd
# does: a nodes list over indented lines, with comment lines and " ;"
# comments, "nodes:", a BOM, and a ";" inside a path (they fell back to
# 7070 and 7071, and emptied another folder than psd's).
ini_reading() {
    f=$tmp/ini
    mkdir -p "$f"
    printf '\357\273\277[cluster]\nnodes = 127.0.0.1:7001,\n  127.0.0.1:7002 ; two\n  ; a comment\n  , [::1]:7003\nshards = 4\n[server]\ndata_dir = /x/d;old ; c\n' >"$f/m.ini"
    printf '[cluster]\nnodes: 127.0.0.1:7070\n' >"$f/c.ini"
    got=$(PROG=t; . "$top/examples/cluster.sh"; trap - EXIT
          ini_nodes "$f/m.ini" | tr '\n' ' '; ini_data_dir "$f/m.ini"
          ini_nodes "$f/c.ini")
    want="127.0.0.1 7001 127.0.0.1 7002 ::1 7003 /x/d;old
127.0.0.1 7070"
    [ "$got" = "$want" ] || { echo "got '$got', want '$want'"; return 1; }
}
check "the demo scripts read an ini's nodes and data_dir as psd does" \
    ini_reading

fashion_from_elsewhere() {
    f=$tmp/elsewhere
    fake_build "$f" ok && demo_ini "$f/c.ini" "$f" || return 1
    (cd / && TMPDIR=$f/tmp expect_status 0 sh "$top/examples/run_fashion.sh" \
        "$f" "$f/c.ini") || return 1
    expect_output "run_fashion: PASS" || return 1
    expect_output "psd node 1 exited 0" || return 1
    # Another ini than conf/cluster-2.ini: its logs in a folder of its own
    # (two runs at once shared build/worker0.log, and one's verdict read
    # the other's figure), said with its absolute path.
    r=$f/runs/run_fashion-c
    expect_output "logs: $r/psd-node*.log, $r/worker*.log" || return 1
    [ -s "$r/worker0.log" ] && [ -s "$r/psd-node1.log" ] ||
        { echo "no logs in $r"; ls -R "$f"; return 1; }
    [ ! -e "$f/worker0.log" ] || { echo "$f/worker0.log written"; return 1; }
    leftovers "$f"
}
check "run_fashion.sh works from another folder, keeps the logs of another ini apart and leaves no psd or temporary folder" \
    fashion_from_elsewhere

faults_failing() {
    f=$tmp/faults
    fake_build "$f" fail || return 1
    TMPDIR=$f/tmp expect_status 1 sh "$top/examples/run_faults.sh" "$f" ||
        return 1
    where=$(sed -n 's/.*FAIL: .*(see \(.*\))$/\1/p' "$tmp/cmd.out")
    if [ -z "$where" ] || [ ! -d "$where" ]; then
        echo "the failure points to '$where', which is not a folder:"
        cat "$tmp/cmd.out"
        return 1
    fi
    if ! grep -rqs "failing on purpose" "$where"; then
        echo "the workers' output is not in $where:"
        ls -lR "$where"
        return 1
    fi
    leftovers "$f"
}
check "run_faults.sh whose workers fail points to a folder that holds their logs, and leaves no psd or temporary folder" \
    faults_failing

# ctrl_c DIR SCRIPT ARGS...: runs SCRIPT as a terminal runs a foreground
# job (its own process group, SIGINT not ignored), waits until both
# stand-in workers run, sends SIGINT to the whole group as Ctrl-C does and
# expects the script to end with status 130 within 20 s. STOP_SIG=SIGHUP:
# a hangup instead (a closed terminal), status 129.
ctrl_c() {
    "$PYTHON" - "$@" <<'EOF'
import os, signal, subprocess, sys, time
d, cmd = sys.argv[1], ["sh"] + sys.argv[2:]
sig = getattr(signal, os.environ.get("STOP_SIG", "SIGINT"))
env = dict(os.environ, TMPDIR=os.path.join(d, "tmp"))
# The signal's default action, whatever this harness inherited: under
# nohup, SIGHUP is ignored, and a shell cannot trap a signal ignored at
# its start, so the script ran on (seen in a .ci/run started with nohup).
def defaults():
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
p = subprocess.Popen(cmd, env=env, start_new_session=True,
                     preexec_fn=defaults)
end = time.time() + 20
while time.time() < end and p.poll() is None:
    out = subprocess.run(["pgrep", "-f", d + "/fashion_softmax"],
                         capture_output=True, text=True).stdout.split()
    if len(out) >= 2:
        break
    time.sleep(0.1)
else:
    sys.exit(f"the stand-in workers never ran (status {p.poll()})")
time.sleep(0.3)
os.killpg(p.pid, sig)
try:
    rc = p.wait(timeout=20)
except subprocess.TimeoutExpired:
    # What each process of the group was doing, for a failure seen once
    # under a loaded CI run and never alone.
    ps = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:24,etime,args",
                         "--sid", str(p.pid)], capture_output=True, text=True)
    os.killpg(p.pid, signal.SIGKILL)
    sys.exit(f"still running 20 s after {sig.name}; its process group "
             f"then:\n{ps.stdout}")
if rc != 128 + sig:
    sys.exit(f"got status {rc} after {sig.name}, want {128 + sig}")
EOF
}

fashion_ctrl_c() {
    f=$tmp/ctrlc
    fake_build "$f" hang && demo_ini "$f/c.ini" "$f" || return 1
    ctrl_c "$f" "$top/examples/run_fashion.sh" "$f" "$f/c.ini" || return 1
    leftovers "$f"
}
check "run_fashion.sh stopped by Ctrl-C stops its psd nodes and workers and removes its temporary folder" \
    fashion_ctrl_c

faults_ctrl_c() {
    f=$tmp/faultsc
    fake_build "$f" hang || return 1
    ctrl_c "$f" "$top/examples/run_faults.sh" "$f" || return 1
    leftovers "$f"
}
check "run_faults.sh stopped by Ctrl-C stops its psd nodes and workers and removes its temporary folder" \
    faults_ctrl_c

# run_cluster.sh's nodes run in network namespaces (root only). psd takes
# SIGHUP for a reload: a hangup of the script (a closed terminal) left
# them running, with their namespaces and token, until the script traps
# it as it does Ctrl-C.
cluster_hangup() {
    f=$tmp/hup
    fake_build "$f" hang || return 1
    before=$(ip netns list 2>/dev/null | sed -n 's/^\(psd-rc[^ ]*\).*/\1/p')
    STOP_SIG=SIGHUP ctrl_c "$f" "$top/examples/run_cluster.sh" "$f"
    ok=$?
    leftovers "$f" || ok=1      # kills what it finds
    for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(psd-rc[^ ]*\).*/\1/p'); do
        case " $(echo $before) " in *" $ns "*) continue ;; esac
        echo "network namespace left: $ns"
        ip netns del "$ns"; rm -rf "/etc/netns/$ns"
        ok=1
    done
    return $ok
}
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null &&
   unshare -n true 2>/dev/null; then
    check "run_cluster.sh hung up (SIGHUP) stops its psd nodes and workers and removes its namespaces and temporary folder" \
        cluster_hangup
else
    n=$((n + 1))
    echo "ok $n - run_cluster.sh hung up # SKIP needs root and network namespaces"
fi

echo "1..$n"
