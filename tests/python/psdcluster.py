"""Real psd processes on free loopback ports for the Python binding's tests.

The same approach as tests/cluster.c: an ini file with free ports in a
temporary folder, one ``$PSD_BIN -c INI -n I`` per node, each waited for
until it accepts connections and killed when the test process dies
(PR_SET_PDEATHSIG), so a failing or crashing test leaves nothing running.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

PR_SET_PDEATHSIG = 1


_recent_ports: List[int] = []
_range_at = 0


def _range_port() -> int:
    """A port of PSD_TEST_PORTS=LO-HI (tests/run.sh gives each program it
    runs at once a range of its own, below the kernel's ephemeral ports),
    taken in turn and free now (nothing bound, nor in TIME_WAIT); 0 when
    unset. Each process starts at a point of the range set by its pid, so
    that shell tests asking a new Python for ports do not go back to the
    ports of the cluster they just stopped."""
    global _range_at
    try:
        lo, hi = (int(x) for x in os.environ["PSD_TEST_PORTS"].split("-"))
    except (KeyError, ValueError):
        return 0
    if lo < 1024 or hi > 65535 or hi < lo:
        return 0
    n = hi - lo + 1
    if not _range_at:
        _range_at = os.getpid() * 7
    for _ in range(n):
        port = lo + _range_at % n
        _range_at += 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in PSD_TEST_PORTS")


def free_port() -> int:
    """A port the kernel just handed out, free now, and none of the last
    64 this process was given: the kernel may hand the same free port to
    two binds in a row (a cluster of two nodes once got one port for
    both), as tests/cluster.c's cluster_free_port also guards against.
    Under tests/run.sh, a port of this program's range (_range_port)."""
    ranged = _range_port()
    if ranged:
        return ranged
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _recent_ports:
            _recent_ports.append(port)
            del _recent_ports[:-64]
            return port
    raise RuntimeError("the kernel kept handing out ports given out before")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _psd_bin() -> str:
    psd = os.environ.get("PSD_BIN")
    if not psd:
        raise RuntimeError("PSD_BIN is not set: run tests/test_python.sh, "
                           "or set it to the psd to test")
    return psd


class Cluster:
    """A psd cluster of ``nodes`` nodes on loopback.

    ``tables`` is ini text for the tables (and any [server] settings),
    ``cluster_lines`` extra lines of the [cluster] section; the ini file,
    the logs and the nodes' data_dir go to a new folder under /tmp whose
    name starts with ``prefix``. ``spec`` is the
    "host:port,..." string, ``ini`` the file's path. ``close()`` stops every
    node and reports the ones that did not exit cleanly.
    """

    def __init__(self, tables: str, nodes: int = 2, shards: int = 4,
                 cluster_lines: str = "workers = 2\n",
                 prefix: str = "psd-pytest-") -> None:
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.ini = os.path.join(self.dir, "cluster.ini")
        self.ports = [free_port() for _ in range(nodes)]
        self.spec = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        # Every cluster keeps its snapshots and journal in its own folder.
        data = f"data_dir = {self.dir}\n"
        if "[server]\n" in tables:
            tables = tables.replace("[server]\n", "[server]\n" + data, 1)
        else:
            tables += "\n[server]\n" + data
        with open(self.ini, "w") as f:
            f.write("[cluster]\nnodes = " +
                    ", ".join(f"127.0.0.1:{p}" for p in self.ports) +
                    f"\nshards = {shards}\n{cluster_lines}\n{tables}\n")
        self.procs: List[Optional[subprocess.Popen]] = []
        try:
            for i in range(nodes):
                self.procs.append(self._start(i))
            for i in range(nodes):
                self._wait_up(i)
        except BaseException:
            self.close()
            raise

    def _start(self, i: int) -> subprocess.Popen:
        parent = os.getpid()

        def die_with_parent() -> None:
            libc = ctypes.CDLL(None)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:       # the parent died before prctl
                os._exit(1)

        log = open(self.log_path(i), "ab")
        try:
            return subprocess.Popen(
                [_psd_bin(), "-c", self.ini, "-n", str(i)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                preexec_fn=die_with_parent)
        finally:
            log.close()

    def _wait_up(self, i: int) -> None:
        for _ in range(500):
            if self.procs[i].poll() is not None:
                break
            if port_open(self.ports[i]):
                return
            time.sleep(0.01)
        raise RuntimeError(f"psd node {i} did not come up; its log:\n"
                           f"{self.log(i)}")

    def log_path(self, i: int) -> str:
        return os.path.join(self.dir, f"node{i}.log")

    def log(self, i: int) -> str:
        try:
            with open(self.log_path(i), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def signal(self, i: int, sig: int) -> None:
        """Sends sig to node i (SIGSTOP freezes it, SIGCONT thaws it)."""
        self.procs[i].send_signal(sig)

    def close(self) -> List[str]:
        """Thaws and SIGTERMs every node, waits up to 10 s each (then
        SIGKILL), removes the folder. Returns a line per node that did not
        exit with status 0, with its log."""
        problems = []
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for i, p in enumerate(self.procs):
            if p is None:
                continue
            try:
                rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                rc = "none: it ignored SIGTERM for 10 s"
            if rc != 0:
                problems.append(f"psd node {i} exit status {rc}; its log:\n"
                                f"{self.log(i)}")
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)
        return problems
