#!/usr/bin/python3
"""torch_fashion: a PyTorch CNN on Fashion-MNIST trained data-parallel by
worker processes whose parameters live in psd (`make run-torch`).

For each mode (async, bsp) it starts two fresh psd nodes on free loopback
ports from conf/torch-fashion.ini (that mode's tables only, a data_dir of
their own under /tmp), runs 4 worker processes and stops the nodes. Each
step a worker pulls every parameter tensor, computes the gradient of its 32
examples with torch and pushes it; the servers apply Adam (the tables'
updater). Then the same model is trained by plain torch in this process,
from the same initial values, with torch.optim.Adam on the 128 examples
the 4 workers share in a step. It prints the test accuracy after each
epoch, worker 0's client statistics, the wall times, and exits 1 if bsp
ends more than --max-diff points away from the single process.

Where the parameters live. One dense table per parameter tensor, a row per
output unit (rows = the tensor's first dimension, dim = the rest), rather
than one flat table of every float: each tensor keeps its own initialiser
(PyTorch's uniform +-1/sqrt(fan-in) differs from layer to layer, and a
table has one), the worker checks each table's shape against the model's,
and hyper-parameters may differ per tensor. The price is 8 requests each
way per step instead of 1: they are issued together with the async calls
and the client sends them together, so a step still waits for about one
round trip each way.

No copies. Each tensor's table has a float32 numpy buffer of shape (rows,
dim), and the torch parameter is a view of it (torch.from_numpy shares the
memory): pull_range writes the servers' values straight into the model's
weights. Likewise each parameter's .grad is a view of a second buffer that
backward() accumulates into and push_range sends from.

Needs the build tree's libpsclient and psd (--build, default build/) and
Debian's python3-torch and python3-numpy; `make run-torch` installs them.
"""

from __future__ import annotations

import argparse
import gzip
import multiprocessing as mp
import os
import queue
import re
import signal
import sys
import time
import traceback
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


# Before the imports below: --help needs neither numpy nor torch.
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"),
                    help="the build tree with psd and libpsclient.so.0 "
                         "(default: build/ of this source tree; the "
                         "environment's PSD_BIN and PSCLIENT_LIB win)")
    ap.add_argument("--ini", default=os.path.join(TOP, "conf",
                                                  "torch-fashion.ini"),
                    help="the cluster's ini (default conf/torch-fashion.ini)")
    ap.add_argument("--data", default=DEFAULT_DATA,
                    help=f"Fashion-MNIST IDX files (default {DEFAULT_DATA})")
    ap.add_argument("--modes", default="async,bsp",
                    help="comma-separated modes to run (default async,bsp)")
    ap.add_argument("--workers", type=int, default=None,
                    help="worker processes (default: the ini's workers)")
    ap.add_argument("--epochs", type=int, default=3,
                    help="passes over the training set (default 3)")
    ap.add_argument("--batch", type=int, default=32,
                    help="examples per worker and step (default 32)")
    ap.add_argument("--max-diff", type=float, default=1.0,
                    help="points of final test accuracy bsp may differ "
                         "from the single process (default 1)")
    args = ap.parse_args()
    # Said here, in a line: each ended in a traceback further on (a zero
    # batch divided by zero, zero epochs left no figure to print).
    for name in ("workers", "epochs", "batch"):
        v = getattr(args, name)
        if v is not None and v < 1:
            ap.error(f"--{name} must be at least 1, got {v}")
    if not args.max_diff >= 0:
        ap.error(f"--max-diff must be a number >= 0, got {args.max_diff}")
    if not [m for m in args.modes.split(",") if m]:
        ap.error(f"--modes names no mode: {args.modes!r}")
    return args


try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    # argparse takes --help cut short too (--he)
    if any(a == "-h" or (len(a) > 2 and "--help".startswith(a))
           for a in sys.argv[1:]):
        parse_args()
    # A python3 other than Debian's (a pyenv or a venv first on PATH) does
    # not see the packages apt installs.
    print(f"torch_fashion: {sys.executable} cannot import {e.name}: this "
          f"example needs numpy and PyTorch. On Debian 12: apt-get install "
          f"python3-numpy python3-torch, then run it with /usr/bin/python3; "
          f"`make run-torch` does both.", file=sys.stderr)
    sys.exit(2)

# Run from a source tree without `make install`: the binding from python/,
# psd nodes through the tests' helper (free ports, a folder of their own,
# killed if this process dies), libpsclient from --build (see below).
sys.path[:0] = [os.path.join(TOP, "python"), os.path.join(TOP, "tests",
                                                          "python")]

SHUFFLE_SEED = 20240613


# ---- data --------------------------------------------------------------------

def load_idx(path: str) -> np.ndarray:
    """An IDX file (gzip'd or not) as a uint8 array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[:2] != b"\0\0" or raw[2] != 8:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
                  for i in range(ndim))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_split(data: str, split: str) -> Tuple[np.ndarray, np.ndarray]:
    """(images n x 28 x 28, labels n) of split "train" or "t10k"."""
    def find(name: str) -> str:
        for suffix in (".gz", ""):
            path = os.path.join(data, name + suffix)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(f"{data}: no {name}[.gz]")
    images = load_idx(find(f"{split}-images-idx3-ubyte"))
    labels = load_idx(find(f"{split}-labels-idx1-ubyte"))
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{data}: {split} has {images.shape[0]} images "
                         f"but {labels.shape[0]} labels")
    return images, labels


def batch(images: np.ndarray, labels: np.ndarray, idx: np.ndarray):
    x = torch.from_numpy(images[idx]).float().div_(255.0).unsqueeze(1)
    return x, torch.from_numpy(labels[idx].astype(np.int64))


# ---- the model ---------------------------------------------------------------

class Net(nn.Module):
    """The CNN: two 3x3 convolutions with 2x2 max-pooling, two linear
    layers; 27,562 parameters. The tables of conf/torch-fashion.ini match
    it. It pools before the ReLU (the same function, since ReLU is
    monotonic), so the ReLU and its gradient see a quarter of the values."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)      # 28 -> 26, pooled to 13
        self.conv2 = nn.Conv2d(8, 16, 3)     # 13 -> 11, pooled to 5
        self.fc1 = nn.Linear(16 * 5 * 5, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(labels), 1000):
            idx = np.arange(i, min(i + 1000, len(labels)))
            x, y = batch(images, labels, idx)
            right += int((model(x).argmax(1) == y).sum())
    model.train()
    return right / len(labels)


class Shard:
    """The work of one process per step: every process shuffles the whole
    training set the same way each epoch; step k covers order[k * step ..
    (k + 1) * step) and this process takes [first, first + count) of it.
    So 4 workers of batch 32 and one process of batch 128 see the same
    examples in every step."""

    def __init__(self, n: int, step: int, first: int, count: int) -> None:
        self.n, self.step, self.first, self.count = n, step, first, count
        self.steps = n // step         # the rest waits for another shuffle

    def epoch(self, e: int) -> List[np.ndarray]:
        order = np.random.default_rng(SHUFFLE_SEED + e).permutation(self.n)
        base = self.first
        return [order[k * self.step + base:k * self.step + base + self.count]
                for k in range(self.steps)]


# ---- the ini -----------------------------------------------------------------

def read_ini(path: str) -> List[Tuple[str, List[str]]]:
    """conf/torch-fashion.ini as (section, lines) in file order; lines
    keep their comments. Lines before the first section go under ""."""
    sections: List[Tuple[str, List[str]]] = [("", [])]
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*\[([^\]]*)\]", line)
            if m:
                sections.append((m.group(1).strip(), []))
            sections[-1][1].append(line)
    return sections


def ini_value(lines: List[str], key: str) -> Optional[str]:
    for line in lines:
        m = re.match(rf"\s*{re.escape(key)}\s*=\s*(.*?)\s*(\s;.*)?$", line)
        if m:
            return m.group(1)
    return None


def mode_tables(sections, mode: str) -> Dict[str, List[str]]:
    """The mode's tables: "conv1_weight" -> the lines of
    [table.conv1_weight_MODE]."""
    suffix = "_" + mode
    return {name[len("table."):-len(suffix)]: lines
            for name, lines in sections
            if name.startswith("table.") and name.endswith(suffix)}


def cluster_text(sections, mode: str) -> str:
    """The [server] section (without data_dir, which psdcluster sets) and
    the mode's tables, for psdcluster.Cluster."""
    text = []
    for name, lines in sections:
        if name == "server":
            text += [ln for ln in lines if ini_value([ln], "data_dir") is None]
        elif name.startswith("table.") and name.endswith("_" + mode):
            text += lines
    return "".join(text)


def start_cluster(sections, mode: str, workers: int):
    from psdcluster import Cluster
    cl = dict(sections)["cluster"]
    nodes = len((ini_value(cl, "nodes") or "").split(","))
    return Cluster(cluster_text(sections, mode), nodes=nodes,
                   shards=int(ini_value(cl, "shards") or 16),
                   cluster_lines=f"workers = {workers}\n",
                   prefix=f"psd-torch-{mode}-")


# ---- parameters in psd -------------------------------------------------------

class Params:
    """The model's parameters bound to the mode's tables: for each tensor
    its table, a weight buffer the parameter is a view of, and a gradient
    buffer its .grad is a view of."""

    def __init__(self, model: nn.Module, client, mode: str) -> None:
        self.entries = []
        for name, p in model.named_parameters():
            t = client.table(name.replace(".", "_") + "_" + mode)
            rows, dim = p.shape[0], p.numel() // p.shape[0]
            if not t.dense or (t.rows, t.dim) != (rows, dim):
                raise SystemExit(f"table {t.name}: dense {t.rows} x {t.dim} "
                                 f"in psd, but {name} needs {rows} x {dim}")
            w = np.empty((rows, dim), np.float32)
            g = np.zeros((rows, dim), np.float32)
            p.data = torch.from_numpy(w).view(p.shape)
            p.grad = torch.from_numpy(g).view(p.shape)
            self.entries.append((t, w, g, p))
        self.pulls: List = []

    def start_pull(self) -> None:
        self.pulls = [t.pull_range_async(0, t.rows, out=w)
                      for t, w, _, _ in self.entries]

    def finish_pull(self) -> None:
        for r in self.pulls:
            r.wait()
        self.pulls = []

    def zero_grad(self) -> None:
        for _, _, g, _ in self.entries:
            g.fill(0.0)

    def push(self) -> List:
        return [t.push_range_async(0, g) for t, _, g, _ in self.entries]

    def check_shared(self) -> None:
        """Raises if torch replaced a parameter or gradient buffer: the
        pulls and pushes would then miss the model."""
        for t, w, g, p in self.entries:
            if (p.data_ptr() != w.ctypes.data or
                    p.grad is None or p.grad.data_ptr() != g.ctypes.data):
                raise RuntimeError(f"{t.name}: the parameter or its .grad "
                                   f"no longer shares the numpy buffer")


# ---- one worker process ------------------------------------------------------

def worker(args: argparse.Namespace, spec: str, mode: str, rank: int,
           results) -> None:
    """Worker `rank` of a mode's run (a spawned process). Worker 0 prints a
    line per epoch and puts (epoch, accuracy, loss, wall) on results; every
    worker puts ("done", rank) at the end."""
    import psclient                    # PSCLIENT_LIB is set: see main()
    torch.set_num_threads(1)           # 4 workers and 2 psd nodes share
    torch.set_num_interop_threads(1)   # the machine's cores

    images, labels = load_split(args.data, "train")
    test_images, test_labels = load_split(args.data, "t10k")
    model = Net()
    shard = Shard(len(labels), args.workers * args.batch, rank * args.batch,
                  args.batch)

    with psclient.connect(spec, worker=rank, sync_timeout_ms=120000) as c:
        params = Params(model, c, mode)
        c.barrier()                    # everyone connected: start together
        t0 = time.monotonic()
        params.start_pull()
        for e in range(1, args.epochs + 1):
            losses = []
            steps = shard.epoch(e)
            for k, idx in enumerate(steps):
                params.finish_pull()
                params.zero_grad()
                x, y = batch(images, labels, idx)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                # Every step (a pointer compare per tensor): a
                # zero_grad(set_to_none=True), torch 2's default, gives
                # .grad a new tensor at the next backward, and the pushes
                # then sent the old buffer's stale gradients without a word.
                params.check_shared()
                losses.append(loss.item())
                pushes = params.push()
                last = e == args.epochs and k + 1 == len(steps)
                if mode == "bsp":
                    # Returns when every worker's pushes of this step were
                    # averaged and applied: the next pull sees the step.
                    c.clock()
                    if not last:
                        params.start_pull()
                elif not last:
                    # The connection keeps its order: this pull sees our
                    # own pushes, and travels with them.
                    params.start_pull()
                for r in pushes:   # before the next backward() reuses g
                    r.wait()
            if e == args.epochs:
                c.barrier()            # every worker's last push is in
                if rank == 0:
                    params.start_pull()    # the final model
            if rank == 0:
                # The weights of the next step, or the final ones. In bsp
                # they are exactly the model after the epoch.
                params.finish_pull()
                acc = accuracy(model, test_images, test_labels)
                wall = time.monotonic() - t0
                loss_e = float(np.mean(losses))
                print(f"  {mode} epoch {e}: test accuracy {acc:.4f}, "
                      f"worker 0 train loss {loss_e:.4f}, wall {wall:.1f} s",
                      flush=True)
                print(f"  {mode} epoch {e}: worker 0 client: "
                      f"{c.stats_line()}", flush=True)
                c.reset_stats()
                results.put((mode, e, acc, loss_e, wall))
                if e != args.epochs and mode != "bsp":
                    params.start_pull()    # fresher than before the test
    results.put(("done", rank))


def run_mode(args, sections, mode: str) -> Optional[List[Tuple]]:
    """One run: fresh nodes, args.workers worker processes. Returns worker
    0's per-epoch records, or None after a message if something failed."""
    ctx = mp.get_context("spawn")     # a psclient Client does not survive
    cluster = start_cluster(sections, mode, args.workers)   # fork()
    print(f"{mode}: {args.workers} workers on psd nodes {cluster.spec} "
          f"(folder {cluster.dir})", flush=True)
    results = ctx.Queue()
    procs = [ctx.Process(target=worker_entry,
                         args=(args, cluster.spec, mode, r, results),
                         name=f"{mode}-worker{r}")
             for r in range(args.workers)]
    records: List[Tuple] = []
    failed = False
    try:
        for p in procs:
            p.start()
        done = 0
        while done < args.workers:
            try:
                item = results.get(timeout=1.0)
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    failed = True
                    break
                continue
            if item[0] == "done":
                done += 1
            else:
                records.append(item)
        for p in procs:
            p.join(timeout=30 if not failed else 5)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
        problems = cluster.close()
    for p in procs:
        if p.exitcode != 0:
            print(f"{mode}: {p.name} exited with status {p.exitcode}",
                  file=sys.stderr)
            failed = True
    for line in problems:
        print(f"{mode}: {line}", file=sys.stderr)
    return None if failed or problems else records


def worker_entry(*a) -> None:
    try:
        worker(*a)
    except SystemExit as e:
        # A message meant for the user (a table of the wrong shape): the
        # line, not a traceback from each worker (a trial).
        print(f"torch_fashion: {a[2]} worker {a[3]}: {e}", file=sys.stderr,
              flush=True)
        os._exit(1)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)


# ---- the single process ------------------------------------------------------

def initial_values(sections, mode: str) -> Dict[str, np.ndarray]:
    """The tables' initial values, as the servers make them from their
    seeds: pulled once from fresh nodes by a reader (worker -1)."""
    import psclient                    # PSCLIENT_LIB is set: see main()
    cluster = start_cluster(sections, mode, 1)
    try:
        with psclient.connect(cluster.spec) as c:
            tables = [c.table(f"{name}_{mode}")
                      for name in mode_tables(sections, mode)]
            return {t.name[:-len(mode) - 1]: t.pull_range(0, t.rows)
                    for t in tables}
    finally:
        cluster.close()


def optimizer_for(model: nn.Module, tables: Dict[str, List[str]]):
    """torch.optim.Adam with each tensor's table's lr, betas and epsilon,
    one parameter group per tensor; what the servers do with adam."""
    groups = []
    for name, p in model.named_parameters():
        lines = tables[name.replace(".", "_")]
        if ini_value(lines, "updater") != "adam":
            raise SystemExit(f"{name}: the single-process run mirrors the "
                             f"adam updater only")
        groups.append({"params": [p],
                       "lr": float(ini_value(lines, "lr")),
                       "betas": (float(ini_value(lines, "beta1")),
                                 float(ini_value(lines, "beta2"))),
                       "eps": float(ini_value(lines, "epsilon"))})
    return torch.optim.Adam(groups)


def run_single(args, sections) -> List[Tuple]:
    """The same model trained by torch alone, in this process, on the
    workers' combined batches, from the servers' initial values and with
    the bsp tables' optimizer. Returns per-epoch records like run_mode."""
    torch.set_num_threads(1)           # like one worker: one core
    init = initial_values(sections, "bsp")
    images, labels = load_split(args.data, "train")
    test_images, test_labels = load_split(args.data, "t10k")
    model = Net()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(init[name.replace(".", "_")])
                    .view(p.shape))
    opt = optimizer_for(model, mode_tables(sections, "bsp"))
    step = args.workers * args.batch
    shard = Shard(len(labels), step, 0, step)
    print(f"single: one process, batch {step}, torch.optim.Adam",
          flush=True)
    records = []
    t0 = time.monotonic()
    for e in range(1, args.epochs + 1):
        losses = []
        for idx in shard.epoch(e):
            x, y = batch(images, labels, idx)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        acc = accuracy(model, test_images, test_labels)
        wall = time.monotonic() - t0
        loss_e = float(np.mean(losses))
        print(f"  single epoch {e}: test accuracy {acc:.4f}, train loss "
              f"{loss_e:.4f}, wall {wall:.1f} s", flush=True)
        records.append(("single", e, acc, loss_e, wall))
    return records


# ---- main --------------------------------------------------------------------

def main() -> int:
    args = parse_args()
    # Spawned workers inherit the environment: they load the same library
    # and the tests' Cluster finds psd through PSD_BIN.
    build = os.path.abspath(args.build)
    os.environ.setdefault("PSCLIENT_LIB",
                          os.path.join(build, "libpsclient.so.0"))
    os.environ.setdefault("PSD_BIN", os.path.join(build, "psd"))
    # What would fail in every worker of every mode, said once before any
    # psd starts: a missing data set gave nine tracebacks from three
    # clusters (a trial).
    for path, what in ((os.path.join(build, "psd"), "psd"),
                       (os.environ["PSCLIENT_LIB"], "libpsclient")):
        if not os.access(path, os.R_OK):
            raise SystemExit(f"torch_fashion: no {what} at {path}: run make "
                             f"first, or give --build")
    try:
        sections = read_ini(args.ini)
        for split in ("train", "t10k"):
            load_split(args.data, split)
    except (OSError, ValueError) as e:
        raise SystemExit(f"torch_fashion: {e}")
    if args.workers is None:
        args.workers = int(ini_value(dict(sections)["cluster"], "workers"))
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if not mode_tables(sections, m):
            raise SystemExit(f"{args.ini}: no tables for mode {m!r}")

    print(f"torch_fashion: PyTorch {torch.__version__}, psd tables from "
          f"{args.ini}; {args.workers} workers x batch {args.batch}, "
          f"{args.epochs} epochs, one torch thread per process, "
          f"{os.cpu_count()} cores", flush=True)
    t_all = time.monotonic()
    runs: Dict[str, List[Tuple]] = {}
    failed = False
    for m in modes:
        rec = run_mode(args, sections, m)
        if rec is None:
            failed = True
        else:
            runs[m] = rec
    if failed:
        # The single process compares with modes that ran: after a failed
        # one it only repeated the failure (a table of the wrong shape
        # crashed it too).
        print("torch_fashion: a mode failed (above): the single process "
              "is not run", file=sys.stderr)
        return 1
    runs["single"] = run_single(args, sections)

    print("\nsummary: test accuracy; wall: seconds from the first step to "
          "the last, per-epoch tests included (it varies with the "
          "machine's load)")
    print(f"  {'run':<8} {'accuracy after each epoch':<32} {'final':>7} "
          f"{'wall':>7}")
    for name, rec in runs.items():
        accs = " ".join(f"{r[2]:.4f}" for r in rec)
        print(f"  {name:<8} {accs:<32} {rec[-1][2]:>7.4f} "
              f"{rec[-1][4]:>7.1f}")
    if "bsp" in runs:
        diffs = " ".join(f"{100 * (b[2] - s[2]):+.2f}"
                         for b, s in zip(runs["bsp"], runs["single"]))
        print(f"bsp - single after each epoch, points: {diffs}")
        diff = 100 * (runs["bsp"][-1][2] - runs["single"][-1][2])
        verdict = "PASS" if abs(diff) <= args.max_diff else "MISSED"
        print(f"bsp - single: {diff:+.2f} points of final test accuracy "
              f"(target: within {args.max_diff:g}): {verdict}")
        failed |= verdict != "PASS"
    print(f"total wall time: {time.monotonic() - t_all:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    # SIGTERM (a timeout, systemd) unwinds as Ctrl-C does, through
    # run_mode's finally: it left the cluster's folder behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        # run_mode's finally has stopped the workers and the nodes; a
        # traceback from the queue it was reading said nothing more (a
        # trial).
        print("torch_fashion: interrupted; workers and nodes stopped",
              file=sys.stderr)
        sys.exit(130)
