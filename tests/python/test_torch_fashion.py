"""Tests of examples/torch_fashion.py (make run-torch) that take seconds,
not the minutes of a training run: conf/torch-fashion.ini matches the
model, and a worker's parameters and gradients are the very buffers psd
pulls into and pushes from. Skipped where PyTorch is not installed
(make test does not install it; make run-torch does)."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import psclient  # noqa: E402

SRC = Path(os.environ.get("PSD_SRC_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SRC / "examples"))
import torch_fashion as tf  # noqa: E402

INI = str(SRC / "conf" / "torch-fashion.ini")


def test_torch_fashion_ini_has_a_table_per_parameter_with_torch_init():
    sections = tf.read_ini(INI)
    model = tf.Net()
    for mode in ("async", "bsp"):
        tables = tf.mode_tables(sections, mode)
        names = [n.replace(".", "_") for n, _ in model.named_parameters()]
        assert sorted(tables) == sorted(names), mode
        fan_in = {}
        for name, p in model.named_parameters():
            lines = tables[name.replace(".", "_")]
            rows, dim = p.shape[0], p.numel() // p.shape[0]
            got = (int(tf.ini_value(lines, "rows")),
                   int(tf.ini_value(lines, "dim")))
            assert got == (rows, dim), f"{name} {mode}: got {got}, " \
                                       f"want {(rows, dim)}"
            if name.endswith("weight"):
                fan_in[name.rsplit(".", 1)[0]] = dim
        for name, _ in model.named_parameters():
            lo, hi = tf.ini_value(tables[name.replace(".", "_")],
                                  "init").split()[1:]
            want = 1 / math.sqrt(fan_in[name.rsplit(".", 1)[0]])
            assert (float(lo), float(hi)) == pytest.approx((-want, want),
                                                           rel=1e-6), name


def test_torch_parameters_are_the_buffers_psd_pulls_into_and_pushes_from():
    sections = tf.read_ini(INI)
    cluster = tf.start_cluster(sections, "async", 1)
    try:
        with psclient.connect(cluster.spec, worker=0) as c:
            model = tf.Net()
            params = tf.Params(model, c, "async")
            params.start_pull()
            params.finish_pull()
            before = {}
            for t, w, g, p in params.entries:
                # The model computes on what the pull wrote.
                assert np.array_equal(p.detach().numpy().reshape(w.shape),
                                      t.pull_range(0, t.rows))
                before[t.name] = w.copy()
            x = torch.rand(8, 1, 28, 28)
            y = torch.arange(8) % 10
            params.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            params.check_shared()
            for r in params.push():
                r.wait()
            # Adam's first step (bias-corrected m = g, v = g * g) moves a
            # weight by lr * g / (|g| + epsilon): the servers applied the
            # gradients that backward() wrote into g.
            tables = tf.mode_tables(sections, "async")
            for t, w, g, p in params.entries:
                lines = tables[t.name[:-len("_async")]]
                lr = float(tf.ini_value(lines, "lr"))
                eps = float(tf.ini_value(lines, "epsilon"))
                g64 = g.astype(np.float64)
                want = before[t.name] - lr * g64 / (np.abs(g64) + eps)
                got = t.pull_range(0, t.rows)
                assert np.allclose(got, want, atol=1e-6), t.name
                assert np.abs(g).max() > 0, t.name
    finally:
        problems = cluster.close()
    assert not problems, "\n".join(problems)
