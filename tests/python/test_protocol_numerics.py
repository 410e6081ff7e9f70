"""PROTOCOL.md section 14 is enough to reproduce psd's numbers: its Python
reference (taken from the document itself, not copied here) computes the
initial rows psd serves and the rows after pushes through every updater,
and the tests compare them bit for bit with what psd returns."""

from __future__ import annotations

import os
import re

import numpy as np
import psclient

F32 = np.float32


def reference() -> dict:
    """The Python block of PROTOCOL.md section 14, executed."""
    top = os.environ.get("PSD_SRC_DIR") or os.path.join(
        os.path.dirname(__file__), "..", "..")
    with open(os.path.join(top, "proto", "PROTOCOL.md"),
              encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## 14. Numerics"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ns: dict = {}
    exec(compile(code, "PROTOCOL.md section 14", "exec"), ns)
    return ns


REF = reference()

INITS = {
    "u": ("uniform", "-0.03", "0.07"),
    "n": ("normal", "0.5", "0.2"),
    "c": ("constant", "0.1"),
}
SEED = 1234567


def init_tables() -> str:
    text = ""
    for name, init in INITS.items():
        spec = " ".join(init)
        text += (f"[table.{name}s]\nkind = sparse\ndim = 7\ninit = {spec}\n"
                 f"seed = {SEED}\n"
                 f"[table.{name}d]\nkind = dense\nrows = 50\ndim = 3\n"
                 f"init = {spec}\nseed = {SEED}\n")
    return text


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, F32).view(np.uint32)


def test_initial_rows_follow_section_14_bit_for_bit(make_cluster):
    cluster = make_cluster(tables=init_tables())
    keys = np.array([0, 1, 2, 77, 2**63 + 5, 2**64 - 1] +
                    [(i * 0x9E3779B97F4A7C15) % 2**64 for i in range(1, 300)],
                    dtype=np.uint64)
    with psclient.connect(cluster.spec) as c:
        for name, init in INITS.items():
            args = (init[0],) + tuple(float(a) for a in init[1:])
            got = c.table(name + "s").pull(keys)
            want = np.stack([REF["init_row"](args, int(k), 7, SEED)
                             for k in keys])
            bad = np.nonzero(bits(got) != bits(want))
            assert bad[0].size == 0, (
                f"{name}: key {keys[bad[0][0]]} col {bad[1][0]}: psd "
                f"{got[bad][0]!r}, section 14 {want[bad][0]!r}")
            got = c.table(name + "d").pull_range(0, 50)
            want = np.stack([REF["init_row"](args, r, 3, SEED)
                             for r in range(50)])
            assert (bits(got) == bits(want)).all(), name


PARAMS = {"lr": "0.05", "beta1": "0.85", "beta2": "0.995",
          "epsilon": "1e-6", "l1": "0.01", "l2": "0.3", "beta": "0.7"}


# Table name, updater, parameters: adam with betas of 0 too, which the
# ini accepts (0 <= beta < 1) and where the reference once raised at
# math.log(0).
UPDATERS = [(u, u, PARAMS) for u in ("sum", "assign", "sgd", "adagrad",
                                      "adam", "ftrl")]
UPDATERS.append(("adam0", "adam", dict(PARAMS, beta1="0", beta2="0")))


def updater_tables() -> str:
    text = ""
    for name, upd, params in UPDATERS:
        text += (f"[table.{name}]\nkind = dense\nrows = 64\ndim = 5\n"
                 f"updater = {upd}\ninit = uniform -1 1\nseed = 3\n")
        text += "".join(f"{k} = {v}\n" for k, v in params.items())
    return text


def test_updaters_follow_section_14_bit_for_bit(make_cluster):
    cluster = make_cluster(tables=updater_tables(), nodes=1)
    rng = np.random.default_rng(11)
    with psclient.connect(cluster.spec) as c:
        for name, upd, params in UPDATERS:
            p = {k: float(v) for k, v in params.items()}
            t = c.table(name)
            w = np.stack([REF["init_row"](("uniform", -1.0, 1.0), r, 5, 3)
                          for r in range(64)])
            st = [{"h": np.zeros(5, F32), "m": np.zeros(5, F32),
                   "v": np.zeros(5, F32), "t": 0, "z": np.zeros(5, F32),
                   "n": np.zeros(5, F32)} for _ in range(64)]
            for step in range(25):
                g = (rng.standard_normal((64, 5)) *
                     10.0 ** rng.integers(-3, 2, (64, 1))).astype(F32)
                if step % 5 == 4:
                    g[::7] = 0                     # a zero gradient too
                t.push_range(0, g)
                for r in range(64):
                    REF["update"](upd, p, w[r], st[r], g[r])
            got = t.pull_range(0, 64)
            bad = np.nonzero(bits(got) != bits(w))
            assert bad[0].size == 0, (
                f"{name}: row {bad[0][0]} col {bad[1][0]} after 25 pushes: "
                f"psd {got[bad][0]!r}, section 14 {w[bad][0]!r}")
