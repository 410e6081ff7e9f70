"""End-to-end tests of the Python binding (python/psclient) against real
psd processes: every call, exact sums from several processes, zero-copy
pulls, argument checks that send nothing, timeouts, and the GIL released
while a call blocks. Run by tests/test_python.sh."""

from __future__ import annotations

import ast
import builtins
import contextlib
import ctypes
import gc
import inspect
import json
import multiprocessing
import os
import pydoc
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import psclient
from psclient import _lib

SRC = Path(os.environ.get("PSD_SRC_DIR", Path(__file__).resolve().parents[2]))
F32 = np.float32
U64 = np.uint64


def keys_of(*ks: int) -> np.ndarray:
    return np.array(ks, dtype=U64)


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# ---- the binding itself -----------------------------------------------------

def test_structs_and_codes_mirror_client_psclient_h(tmp_path):
    """Every ctypes struct has the C struct's size and every field's
    offset and size, and every PS_* code its value, as a C compiler sees
    client/psclient.h; every PS_E* code of the header has its exception."""
    import re
    structs = {"ps_options": _lib.PsOptions,
               "ps_table_info": _lib.PsTableInfo,
               "ps_op_stats": _lib.PsOpStats, "ps_stats_t": _lib.PsStats}
    codes = sorted(set(re.findall(r"\b(PS_E[A-Z]+|PS_OK|PS_STAT_KINDS)\b",
                                  (SRC / "client" / "psclient.h").read_text())))
    lines = []
    for cname, st in structs.items():
        lines.append(f'printf("{cname} %zu 0\\n", sizeof({cname}));')
        for f, _ in st._fields_:
            lines.append(f'printf("{cname}.{f} %zu %zu\\n", '
                         f'offsetof({cname}, {f}), '
                         f'sizeof((({cname} *)0)->{f}));')
    lines += [f'printf("{c} %d 0\\n", (int){c});' for c in codes]
    prog = tmp_path / "layout.c"
    prog.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"psclient.h\"\n"
        "int main(void)\n{\n" + "".join(f"    {ln}\n" for ln in lines) +
        "    return 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Werror",
                    "-I", str(SRC / "client"), "-o", str(exe), str(prog)],
                   check=True)
    c_side = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, a, b = line.split()
        c_side[name] = (int(a), int(b))
    py_side = {}
    for cname, st in structs.items():
        py_side[cname] = (ctypes.sizeof(st), 0)
        for f, _ in st._fields_:
            py_side[f"{cname}.{f}"] = (getattr(st, f).offset,
                                       getattr(st, f).size)
    for c in codes:
        py_side[c] = ((len(_lib.STAT_KINDS) if c == "PS_STAT_KINDS" else
                       getattr(psclient, c)), 0)
    assert py_side == c_side
    assert len(codes) > 15                   # the header was read
    for c in codes:
        if c.startswith("PS_E"):
            exc = psclient._error(getattr(psclient, c), "")
            assert type(exc) is not psclient.Error, c   # a subclass each
            assert c in psclient.__all__


def test_a_library_without_a_function_is_an_import_error(tmp_path):
    """load() promises ImportError naming every place tried; a library
    that lacks one of the functions (an older libpsclient.so.0) raised
    AttributeError from ctypes instead."""
    src = tmp_path / "old.c"
    src.write_text("void ps_options_init(void *o) { (void)o; }\n")
    lib = tmp_path / "libpsclient.so.0"
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o",
                    str(lib), str(src)], check=True)
    env = dict(os.environ, PSCLIENT_LIB=str(lib))
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([sys.executable, "-c", "import psclient"], env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()
    assert any(line.startswith("ImportError: psclient: cannot load")
               for line in last), r.stderr
    assert str(lib) in r.stderr and "ps_open" in r.stderr


def test_defaults_come_from_ps_options_init():
    d = psclient.default_options()
    assert d["worker"] == -1
    assert set(d) == set(_lib.OPTION_NAMES)
    assert all(v > 0 for k, v in d.items() if k not in ("worker",
                                                          "batch_delay_us"))
    o = _lib.make_options(psclient._LIB, None, request_timeout_ms=123,
                          max_retries=None)
    assert (o.request_timeout_ms, o.max_retries) == (123, d["max_retries"])
    assert o.auth_token is None and not any(o.reserved)


def test_auth_token_and_options_reach_ps_open(monkeypatch):
    """connect() hands the token and every option to ps_open as they
    are (a spy stands in for ps_open)."""
    seen = {}

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def ps_open(self, handle, servers, opts):
            o = opts._obj
            seen.update(servers=servers, token=o.auth_token, worker=o.worker,
                        sync=o.sync_timeout_ms, inflight=o.max_inflight_bytes)
            return psclient.PS_EAUTH

    real = psclient._LIB
    monkeypatch.setattr(psclient, "_LIB", Spy())
    with pytest.raises(psclient.AuthError) as e:
        psclient.connect("127.0.0.1:9", worker=3, auth_token="s3cret",
                         sync_timeout_ms=777, max_inflight_bytes=1 << 40)
    assert seen == dict(servers=b"127.0.0.1:9", token=b"s3cret", worker=3,
                        sync=777, inflight=1 << 40)
    assert isinstance(e.value, PermissionError)
    assert e.value.code == psclient.PS_EAUTH


def test_a_failed_connect_says_why(tmp_path):
    """The reason ps_open gives (ps_last_error(NULL), also on stderr, which
    a notebook does not show) is in the exception: the option out of
    range, the address nobody answers on."""
    with pytest.raises(psclient.InvalidError,
                       match=r"request_timeout_ms = 0; it must be 1\.\."):
        psclient.connect("127.0.0.1:9", request_timeout_ms=0)
    # A port of the runner's range, out of the kernel's ephemeral ones:
    # one of those may be taken meanwhile by another program's listener.
    from psdcluster import free_port
    port = free_port()
    with pytest.raises(psclient.ConnectionError,
                       match=f"no connection to 127.0.0.1:{port} within "
                             r"connect_timeout_ms \(200 ms\): connection "
                             "refused") as e:
        psclient.connect(f"127.0.0.1:{port}", connect_timeout_ms=200)
    assert str(e.value).count(f"127.0.0.1:{port}") == 1, str(e.value)
    # As bytes (os.fspath takes them): the same error, not a TypeError.
    with pytest.raises(psclient.ConnectionError,
                       match=f"127.0.0.1:{port}"):
        psclient.connect(f"127.0.0.1:{port}".encode(), connect_timeout_ms=200)
    # An ini is named as the cluster it describes, not as a host.
    ini = tmp_path / "down.ini"
    ini.write_text(f"[cluster]\nnodes = 127.0.0.1:{port}\n")
    with pytest.raises(psclient.ConnectionError,
                       match=f"cannot connect to the cluster of {ini}: .*"
                             f"127.0.0.1:{port}"):
        psclient.connect(str(ini), connect_timeout_ms=200)


def test_token_opens_a_cluster_that_requires_one(make_cluster, monkeypatch):
    """A cluster with a token: the right token (argument, environment or
    the ini) connects; a wrong or missing one raises AuthError."""
    from conftest import TABLES
    token = "correct-horse-battery-staple-42"
    c = make_cluster(TABLES + "\n[server]\nauth_token = " + token + "\n")
    monkeypatch.delenv("PSD_AUTH_TOKEN", raising=False)
    keys = np.array([1, 2], np.uint64)
    with psclient.connect(c.spec, auth_token=token) as cl:
        cl.table("emb").push(keys, np.ones((2, 4), np.float32))
    with psclient.connect(c.ini) as cl:            # the ini's auth_token
        out = cl.table("emb").pull(keys, np.empty((2, 4), np.float32))
        assert (out == 1).all()
    monkeypatch.setenv("PSD_AUTH_TOKEN", token)
    with psclient.connect(c.spec):
        pass
    monkeypatch.delenv("PSD_AUTH_TOKEN")
    for bad in ("correct-horse-battery-staple-43", None):
        with pytest.raises(psclient.AuthError) as e:
            psclient.connect(c.spec, auth_token=bad, connect_timeout_ms=3000)
        assert e.value.code == psclient.PS_EAUTH


def test_a_failed_connect_is_said_once_by_the_exception(capfd):
    """The binding raises the reason ps_open gives, so the library keeps
    it off stderr (ps_options.quiet): a notebook shows it once."""
    with pytest.raises(psclient.InvalidError, match="bad server address"):
        psclient.connect("localhost")
    assert "libpsclient" not in capfd.readouterr().err


def test_bad_options_raise_before_connecting():
    with pytest.raises(TypeError, match="request_timeout_ms: expected an int"):
        psclient.connect("127.0.0.1:9", request_timeout_ms=1.5)
    with pytest.raises(ValueError, match="max_retries: .* out of range"):
        psclient.connect("127.0.0.1:9", max_retries=1 << 40)
    with pytest.raises(TypeError, match="unexpected keyword"):
        psclient.Client("127.0.0.1:9", color=3)


def test_errors_carry_code_and_message_and_match_builtins():
    e = psclient.TimeoutError(psclient.PS_ETIMEDOUT, "no answer from node 1")
    assert isinstance(e, psclient.Error)
    assert isinstance(e, builtins.TimeoutError)
    assert e.code == psclient.PS_ETIMEDOUT
    assert e.message == "no answer from node 1"
    assert str(e).startswith("PS_ETIMEDOUT (")
    assert str(e).endswith("): no answer from node 1")
    assert issubclass(psclient.ConnectionError, builtins.ConnectionError)
    assert issubclass(psclient.KeyError, builtins.KeyError)
    assert issubclass(psclient.TableError, LookupError)
    assert issubclass(psclient.InvalidError, ValueError)
    for name in ("TimeoutError", "ConnectionError", "KeyError"):
        assert name not in psclient.__all__      # import * shadows nothing
    import pickle
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is psclient.TimeoutError and back.code == e.code
    # A number past a C int is no status (2**40 was cut to 0: "success").
    assert psclient.strerror(0) == "success"
    assert psclient.strerror(2**40) == psclient.strerror(-2**31) != "success"


def test_help_documents_every_public_name():
    text = pydoc.render_doc(psclient, renderer=pydoc.plaintext)
    for word in ("ctypes", "GIL", "connect(", "PSCLIENT_LIB", "pull_async",
                 "class Table", "class Request", "PS_ETIMEDOUT",
                 # What client/psclient.h says of failures, said here too:
                 # a failed pull's out, a status read too late.
                 "may leave anything in", "no longer known"):
        assert word in " ".join(text.split())
    for name in psclient.__all__:
        obj = getattr(psclient, name)
        if callable(obj):
            assert obj.__doc__, name
        if isinstance(obj, type) and not issubclass(obj, Exception):
            for attr, member in vars(obj).items():
                if not attr.startswith("_"):
                    assert member.__doc__, f"{name}.{attr}"


def test_connect_to_nothing_raises_connection_error():
    port = __import__("psdcluster").free_port()
    with pytest.raises(psclient.Error) as e:
        psclient.connect(f"127.0.0.1:{port}", connect_timeout_ms=500)
    assert e.value.code in (psclient.PS_ECONN, psclient.PS_ETIMEDOUT)
    assert f"127.0.0.1:{port}" in e.value.message


# ---- every call -------------------------------------------------------------

def test_threads_asking_for_a_new_table_at_once_get_one_object(
        cluster, monkeypatch):
    """c.table(name) from several threads at once, for a table not asked
    for yet: each thread made a Table of its own (two objects for one
    table, both working). Table's constructor is slowed here so that the
    threads meet in it, as they could by chance."""
    made = psclient.Table.__init__

    def slow(self, *args, **kwargs):
        time.sleep(0.05)
        made(self, *args, **kwargs)

    monkeypatch.setattr(psclient.Table, "__init__", slow)
    with psclient.connect(cluster.spec) as c:
        start = threading.Barrier(8)
        got = []

        def ask():
            start.wait()
            got.append(c.table("emb"))

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 8
        assert all(t is got[0] for t in got)
        assert c.table("emb") is got[0]


def test_table_reports_its_shape_and_unknown_tables_raise(cluster):
    with psclient.connect(cluster.spec) as c:
        d = c.table("dense")
        assert (d.id, d.name, d.dense, d.rows, d.dim) == (1, "dense", True,
                                                          100, 3)
        e = c.table("emb")
        assert (e.dense, e.dim) == (False, 4)
        assert c.table("emb") is e
        with pytest.raises(psclient.TableError, match="nope") as err:
            c.table("nope")
        assert err.value.code == psclient.PS_ENOTABLE
        assert isinstance(err.value, LookupError)


def test_a_tables_shape_is_read_only(cluster):
    """The library writes rows of the table's own dim: a dim set smaller
    in Python sized out too small, and a pull overran it (a segfault)."""
    with psclient.connect(cluster.spec) as c:
        d = c.table("dense")
        for attr, value in (("dim", 1), ("id", 0), ("rows", 1),
                            ("dense", False), ("name", "emb")):
            with pytest.raises(AttributeError):
                setattr(d, attr, value)
        assert d.pull(np.arange(100, dtype=U64)).shape == (100, 3)
        # Names are str: bytes made a second Table, named "b'dense'".
        with pytest.raises(TypeError, match="name: expected a str"):
            c.table(b"dense")
        with pytest.raises(TypeError, match="name: expected a str"):
            c.table(bytearray(b"dense"))
        with pytest.raises(TypeError, match="got a bool"):
            c.stats(True)
        # numpy's bools too (operator.index takes them as 0 and 1).
        with pytest.raises(TypeError, match="got a bool"):
            c.stats(np.True_)
        with pytest.raises(TypeError, match="got a bool"):
            d.pull_range(np.True_, 1)
    with pytest.raises(TypeError, match="got a bool"):
        psclient.connect(cluster.spec, worker=np.True_)
    # A client whose __init__ raised (a debugger shows it) has a repr.
    half = object.__new__(psclient.Client)
    assert "not connected" in repr(half)


def test_a_dropped_client_closes_at_once(cluster):
    """Its tables and requests refer to it: each held it in a cycle, so a
    client dropped after c.table() stayed open until the garbage collector
    ran, and connecting again as its worker was refused (PS_EBUSY)."""
    def train():
        c = psclient.connect(cluster.spec, worker=0)
        t = c.table("emb")
        t.push(keys_of(1, 2), np.ones((2, 4), F32))
        t.pull_async(keys_of(1, 2))        # dropped unread
        return weakref.ref(c)

    was = gc.isenabled()
    gc.disable()
    try:
        gone = train()
        assert gone() is None
        with psclient.connect(cluster.spec, worker=0,
                              connect_timeout_ms=1500) as c:
            assert c.worker == 0
            r = c.table("emb").pull_async(keys_of(1))
            del c
        # Its client closed as the with block ended; the status was read.
        np.testing.assert_array_equal(r.wait(), np.ones((1, 4), F32))
    finally:
        if was:
            gc.enable()


def test_a_client_dropped_after_a_failed_wait_all_closes_at_once(cluster):
    """wait_all raised the error it kept in a local: its frame held the
    exception holding the frame, and the client with it, open with its
    worker id until the garbage collector ran."""
    def train():
        c = psclient.connect(cluster.spec, worker=0)
        c.table("dense").push_range_async(0, np.full((1, 3), np.nan, F32))
        with pytest.raises(psclient.NonFiniteError):
            c.wait_all()

    was = gc.isenabled()
    gc.disable()
    try:
        train()
        with psclient.connect(cluster.spec, worker=0,
                              connect_timeout_ms=1500) as c:
            assert c.worker == 0
    finally:
        if was:
            gc.enable()


def test_blocking_calls_let_go_of_dropped_requests_that_completed(cluster):
    """The package docstring: each call that issues a request reads the
    dropped ones that are done. Blocking calls did not, so the arrays of
    dropped async pulls stayed until the next *_async call."""
    with psclient.connect(cluster.spec) as c:
        d = c.table("dense")
        outs = []
        for _ in range(5):
            out = np.empty((100, 3), F32)
            outs.append(weakref.ref(out))
            d.pull_range_async(0, 100, out)      # dropped unread
            del out
        # Each blocking call reads those done so far; a hang bound, not
        # a timing: 500 calls of a pull each.
        for _ in range(500):
            d.pull(keys_of(1))
            if all(o() is None for o in outs):
                break
        assert [o() for o in outs] == [None] * 5


def test_connect_takes_the_ini_path_too(cluster):
    with psclient.connect(Path(cluster.ini)) as c:
        assert c.table("dense").rows == 100


def test_push_then_pull_returns_the_sums(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("emb")
        k = keys_of(1, 2, 1 << 63, 5)
        g = np.arange(16, dtype=F32).reshape(4, 4)
        t.push(k, g)
        t.push(k, g.ravel())                    # (n*dim,) works too
        got = t.pull(k)
        assert got.shape == (4, 4) and got.dtype == F32
        np.testing.assert_array_equal(got, 2 * g)
        # Duplicates are allowed, in any order.
        np.testing.assert_array_equal(t.pull(keys_of(5, 1, 5)),
                                      2 * g[[3, 0, 3]])


def test_stats_count_what_was_done_as_a_dict(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("emb")
        c.reset_stats()
        k = keys_of(1, 2, 3)
        t.push(k, np.ones((3, 4), dtype=F32))
        t.pull(k)
        t.pull(k)
        s = c.stats()
        assert s["push"]["requests"] == 1
        assert s["pull"]["requests"] == 2
        assert s["pull"]["payload_received"] == 2 * 3 * 4 * 4
        assert s["push"]["p50_us"] > 0
        assert "pushpull" not in s               # a kind not used is absent
        assert s["resends"] == 0 and s["timeouts"] == 0
        assert s["bytes_sent"] > s["payload_sent"] > 0
        assert sum(c.stats(node=i)["frames_sent"] for i in (0, 1)) == \
            s["frames_sent"]
        assert c.stats_line().startswith("push 1 p50 ")
        with pytest.raises(psclient.InvalidError):
            c.stats(node=7)
        c.reset_stats()
        assert c.stats().get("push") is None     # as the docstring says


def test_pull_of_a_never_pushed_key_reads_its_seeded_row(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("seeded")
        a = t.pull(keys_of(11, 12))
        assert ((a >= 1) & (a <= 2)).all()
        np.testing.assert_array_equal(t.pull(keys_of(12, 11)), a[::-1])


def test_pushpull_returns_the_rows_after_the_push(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("emb")
        k = keys_of(7, 8, 9)
        one = np.ones((3, 4), F32)
        np.testing.assert_array_equal(t.pushpull(k, one), one)
        np.testing.assert_array_equal(t.pushpull(k, one), 2 * one)


def test_ranges_cover_rows_on_both_nodes(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("dense")
        v = np.arange(100 * 3, dtype=F32).reshape(100, 3)
        t.push_range(0, v)
        t.push_range(10, v[10:20].ravel())
        got = t.pull_range(0, 100)
        want = v.copy()
        want[10:20] *= 2
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(t.pull_range(95, 5), want[95:])
        # Keyed pulls read the same rows of a dense table.
        np.testing.assert_array_equal(t.pull(keys_of(99, 0, 15)),
                                      want[[99, 0, 15]])


def test_rows_outside_a_dense_table_raise_key_error(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("dense")
        with pytest.raises(psclient.KeyError,
                           match=r"rows 99\.\.100 go past the end of table "
                                 r"'dense' \(rows = 100: its last row is "
                                 r"99\)"):
            t.pull_range(99, 2)
        with pytest.raises(psclient.KeyError,
                           match=r"rows 100\.\.101 are outside table "
                                 r"'dense' \(rows = 100\)"):
            t.pull_range(100, 2)
        with pytest.raises(psclient.KeyError, match="no row 100"):
            t.push(keys_of(100), np.zeros(3, F32))
        with pytest.raises(psclient.InvalidError, match="sparse"):
            c.table("emb").pull_range(0, 1)


def test_a_range_past_the_table_raises_key_error_before_allocating_out(
        cluster):
    """pull_range without out allocated count rows before the library saw
    the range: a count far past the table (rows x dim, say) raised numpy's
    MemoryError or "array is too big" instead of the library's KeyError."""
    with psclient.connect(cluster.spec) as c:
        t = c.table("dense")
        for first, count in ((0, 1 << 40), (0, 1 << 62), (99, 1 << 62),
                             ((1 << 64) - 1, 1 << 63)):
            with pytest.raises(psclient.KeyError,
                               match=r"(rows \d+\.\.\d+ go past the end of|"
                                     r"(rows \d+\.\.\d+|\d+ rows from row \d+ "
                                     r"\(past row 2\^64 - 1\)) are outside) "
                                     r"table 'dense' \(rows = 100") as e:
                t.pull_range(first, count)
            assert e.value.code == psclient.PS_EKEY
            with pytest.raises(psclient.KeyError):
                t.pull_range_async(first, count)
            # With out, the same KeyError (it was a ValueError about out's
            # shape against 2^62 rows).
            with pytest.raises(psclient.KeyError):
                t.pull_range(first, count, out=np.zeros((2, 4), np.float32))
        with pytest.raises(psclient.InvalidError, match="an empty range"):
            t.pull_range(5, 0)
        with pytest.raises(psclient.InvalidError,
                           match="table 'emb' is sparse"):
            c.table("emb").pull_range(0, 1 << 62)
        # The next request takes the very next timestamp: nothing was sent.
        before = t.pull_range_async(0, 1)
        before.wait()
        with pytest.raises(psclient.KeyError):
            t.pull_range(0, 1 << 40)
        assert t.pull_range_async(0, 1).ts == before.ts + 1
        # The library's text for the same range, given an out to write.
        out = np.zeros((2, 3), F32)
        for first, count in ((99, 2), ((1 << 64) - 1, 2)):
            with pytest.raises(psclient.KeyError) as lib:
                t.pull_range(first, count, out=out)
            with pytest.raises(psclient.KeyError) as ours:
                t.pull_range(first, count)
            assert ours.value.message == lib.value.message
        with pytest.raises(psclient.InvalidError) as lib:
            t.pull_range(5, 0, out=np.zeros((0, 3), F32))
        with pytest.raises(psclient.InvalidError) as ours:
            t.pull_range(5, 0)
        assert ours.value.message == lib.value.message


def test_async_calls_return_requests_numbered_by_one(cluster):
    with psclient.connect(cluster.spec) as c:
        t, d = c.table("emb"), c.table("dense")
        k = keys_of(3, 4)
        g = np.full((2, 4), 2, F32)
        r1 = t.push_async(k, g)
        r2 = t.pushpull_async(k, g)
        r3 = t.pull_async(k)
        r4 = d.push_range_async(0, np.ones((2, 3), F32))
        r5 = d.pull_range_async(0, 2)
        assert [r.ts for r in (r2, r3, r4, r5)] == [r1.ts + i
                                                     for i in range(1, 5)]
        assert r1.wait() is None and r4.wait() is None
        assert r2.wait().shape == (2, 4)
        np.testing.assert_array_equal(r3.wait(), 4 * np.ones((2, 4)))
        np.testing.assert_array_equal(r5.wait(), np.ones((2, 3)))
        assert r3.done and r3.wait() is r3.wait()       # waiting again is fine
        assert "ok" in repr(r3)


def test_wait_all_completes_every_request(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("emb")
        k = keys_of(21, 22, 23)
        outs = []
        for _ in range(10):
            t.push_async(k, np.ones((3, 4), F32))
        for _ in range(3):
            outs.append(np.zeros((3, 4), F32))
            t.pull_async(k, out=outs[-1])
        c.wait_all()
        np.testing.assert_array_equal(t.pull(k), 10 * np.ones((3, 4)))


# ---- arrays: no copies, kept alive, checked ---------------------------------

def test_pulls_write_into_the_given_out_without_a_copy(cluster):
    with psclient.connect(cluster.spec) as c:
        t, d = c.table("emb"), c.table("dense")
        k = keys_of(31, 32)
        t.push(k, np.ones((2, 4), F32))
        cases = [
            lambda o: t.pull(k, out=o),
            lambda o: t.pushpull(k, np.zeros((2, 4), F32), out=o),
            lambda o: t.pull_async(k, out=o).wait(),
        ]
        for shape in ((2, 4), (8,)):
            for call in cases:
                out = np.full(shape, -1, F32)
                where = addr(out)
                got = call(out)
                assert got is out
                assert addr(got) == where and np.shares_memory(got, out)
                np.testing.assert_array_equal(got, np.ones(shape))
        out = np.full((5, 3), -1, F32)
        got = d.pull_range(0, 5, out=out)
        assert got is out and addr(got) == addr(out)
        assert (out == 0).all()
        # A view into a bigger array is written in place as well.
        big = np.full((10, 4), -1, F32)
        t.pull(k, out=big[3:5])
        np.testing.assert_array_equal(big[3:5], np.ones((2, 4)))
        assert (big[:3] == -1).all() and (big[5:] == -1).all()


def test_a_request_keeps_its_arrays_alive_until_it_completed(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("emb")
        k = keys_of(41)
        grads = np.full(4, 3, F32)
        alive = weakref.ref(grads)
        req = t.push_async(k, grads)
        del grads
        gc.collect()
        assert alive() is not None
        req.wait()
        gc.collect()
        assert alive() is None
        # A dropped handle: its arrays stay alive until the client reads its
        # status, and the client does not keep more than 1024 unread.
        refs = []
        for _ in range(1500):
            g = np.ones(4, F32)
            refs.append(weakref.ref(g))
            t.push_async(k, g)
        del g
        gc.collect()
        assert sum(r() is not None for r in refs) <= 1025
        c.wait_all()
        gc.collect()
        assert sum(r() is not None for r in refs) == 0
        np.testing.assert_array_equal(t.pull(k), np.full((1, 4), 1503))


def test_keys_changed_in_flight_change_what_is_pulled_as_docs_say(
        make_cluster):
    """Every buffer is borrowed until the request completes
    (client/psclient.h): keys are read again when a part is sent again,
    so keys changed after pull_async returned can pull other rows. The
    docstrings said only that grads and vals must not change."""
    cl = make_cluster()
    with psclient.connect(cl.spec, request_timeout_ms=300, max_retries=5,
                          connect_timeout_ms=300) as c:
        t = c.table("emb")
        on_1 = []                                # keys of node 1
        for key in range(1, 200):
            c.reset_stats()
            t.pull(keys_of(key))
            if c.stats(node=1).get("pull"):
                on_1.append(key)
            if len(on_1) == 2:
                break
        a, b = on_1
        t.push(keys_of(a, b), np.array([[1] * 4, [2] * 4], F32))
        keys = keys_of(a)
        out = np.zeros((1, 4), F32)
        c.reset_stats()
        cl.signal(1, signal.SIGSTOP)
        try:
            req = t.pull_async(keys, out=out)
            keys[0] = b                          # while it is in flight
            # Timed out: the part goes again once the node is back.
            for _ in range(1000):
                if c.stats()["timeouts"]:
                    break
                time.sleep(0.01)
            assert c.stats()["timeouts"]
        finally:
            cl.signal(1, signal.SIGCONT)
        req.wait()
        np.testing.assert_array_equal(out, [[2] * 4])    # b's row
    for call in ("pull_async", "push_async", "pushpull_async"):
        doc = " ".join(getattr(psclient.Table, call).__doc__.split())
        assert "``keys``" in doc and "must not change" in doc, call
    doc = " ".join(psclient.__doc__.split())
    assert "must not change until" in doc


BAD_CALLS = [
    # (what, call(t, d, k, g), exception, text)
    ("keys as a list", lambda t, d, k, g: t.pull([1, 2]),
     TypeError, "keys: expected a numpy array of dtype uint64, got a list"),
    ("int64 keys", lambda t, d, k, g: t.pull(k.astype(np.int64)),
     TypeError, "dtype uint64, got an array of dtype int64"),
    ("big-endian keys", lambda t, d, k, g: t.pull(k.astype(">u8")),
     TypeError, "dtype uint64"),
    ("strided keys", lambda t, d, k, g: t.pull(np.repeat(k, 2)[::2]),
     TypeError, "C-contiguous"),
    ("2-D keys", lambda t, d, k, g: t.pull(k.reshape(2, 1)),
     ValueError, "one dimension"),
    ("float64 grads", lambda t, d, k, g: t.push(k, g.astype(np.float64)),
     TypeError, "grads: expected a numpy array of dtype float32"),
    ("Fortran-order grads", lambda t, d, k, g: t.push(k, np.asfortranarray(g)),
     TypeError, "C-contiguous"),
    ("unaligned grads", lambda t, d, k, g: t.push(
        k, np.frombuffer(bytearray(33), F32, count=8, offset=1)),
     TypeError, "aligned"),
    ("grads of the wrong shape", lambda t, d, k, g: t.push(k, g[:, :3].copy()),
     ValueError, "grads: expected shape (2, 4) or (8,), got (2, 3)"),
    ("out of the wrong shape", lambda t, d, k, g: t.pull(k, out=g[:1].copy()),
     ValueError, "out: expected shape (2, 4)"),
    ("float64 out", lambda t, d, k, g: t.pull(k, out=np.zeros((2, 4))),
     TypeError, "out: expected a numpy array of dtype float32"),
    ("masked grads", lambda t, d, k, g: t.push(
        k, np.ma.masked_array(g, mask=g > 0)),
     TypeError, "grads: a masked array's mask would be ignored"),
    ("masked out", lambda t, d, k, g: t.pull(
        k, out=np.ma.masked_array(np.zeros((2, 4), F32))),
     TypeError, "out: a masked array's mask would be ignored"),
    ("broadcast out", lambda t, d, k, g: t.pull(
        k, out=np.broadcast_to(F32(0), (2, 4))), TypeError, "C-contiguous"),
    ("read-only out", lambda t, d, k, g: t.pull(
        k, out=np.frombuffer(bytes(32), F32).reshape(2, 4)),
     ValueError, "out: the array is read-only"),
    ("pushpull out of the wrong shape", lambda t, d, k, g: t.pushpull_async(
        k, g, out=np.zeros(9, F32)), ValueError, "out: expected shape"),
    ("range vals not whole rows", lambda t, d, k, g: d.push_range(
        0, np.zeros(7, F32)), ValueError, "vals: expected shape (count, 3)"),
    ("negative count", lambda t, d, k, g: d.pull_range(0, -1),
     ValueError, "count: -1 is not in"),
    ("first as a string", lambda t, d, k, g: d.pull_range_async("0", 1),
     TypeError, "first: expected an int, got a str"),
]


@pytest.mark.parametrize("what,call,exc,text", BAD_CALLS,
                         ids=[b[0] for b in BAD_CALLS])
def test_bad_arrays_raise_before_anything_is_sent(cluster, what, call, exc,
                                                  text):
    """The check fails before the library is called: the next request
    takes the very next timestamp, and the table is untouched."""
    with psclient.connect(cluster.spec) as c:
        t, d = c.table("emb"), c.table("dense")
        k = keys_of(51, 52)
        g = np.ones((2, 4), F32)
        before = t.pull_async(k)
        before.wait()
        with pytest.raises(exc) as e:
            call(t, d, k, g)
        assert text in str(e.value)
        assert not isinstance(e.value, psclient.Error)
        after = t.pull_async(k)
        assert after.ts == before.ts + 1
        assert (after.wait() == 0).all()
        assert (d.pull_range(0, 100) == 0).all()


# ---- several processes and threads ------------------------------------------

def push_ones(spec: str, rounds: int) -> int:
    """One worker process: pushes +1 to every key of `emb` and every row of
    `dense` `rounds` times, through each kind of call."""
    import numpy as np
    import psclient
    keys = np.arange(64, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    with psclient.connect(spec) as c:
        t, d = c.table("emb"), c.table("dense")
        ones = np.ones((64, t.dim), np.float32)
        rows = np.ones((d.rows, d.dim), np.float32)
        pending = []
        for r in range(rounds):
            if r % 3 == 0:
                t.push(keys, ones)
            elif r % 3 == 1:
                pending.append(t.push_async(keys, ones))
            else:
                t.pushpull(keys, ones)
            pending.append(d.push_range_async(0, rows))
        for req in pending:
            req.wait()
    return rounds


def test_four_processes_pushing_one_give_exact_sums(cluster):
    rounds = 30
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        done = pool.starmap_async(push_ones, [(cluster.spec, rounds)] * 4)
        assert done.get(timeout=120) == [rounds] * 4
    keys = np.arange(64, dtype=U64) * U64(0x9E3779B97F4A7C15)
    with psclient.connect(cluster.spec) as c:
        got = c.table("emb").pull(keys)
        np.testing.assert_array_equal(got, np.full((64, 4), 4 * rounds))
        dense = c.table("dense").pull_range(0, 100)
        np.testing.assert_array_equal(dense, np.full((100, 3), 4 * rounds))


def use_after_fork(c, t, req, results) -> None:
    """The child of the test below: the parent's client, table and unread
    request as fork() copied them."""
    out = {}
    for name, call in (("pull", lambda: t.pull(keys_of(81))),
                       ("wait", req.wait), ("stats", c.stats),
                       ("table", lambda: c.table("emb"))):
        try:
            call()
            out[name] = "no error"
        except psclient.ClosedError as e:
            out[name] = e.message
        except BaseException as e:
            out[name] = repr(e)
    out["closed"] = c.closed
    c.close()                    # as __del__ would, at the child's exit
    results.put(out)


def test_a_client_used_after_fork_raises_instead_of_hanging(cluster):
    """fork() copies a client but not its I/O thread: a call in the child
    waited for an answer that nothing would ever read, forever, and the
    child's close() handed the parent's thread to the library to stop."""
    ctx = multiprocessing.get_context("fork")
    with psclient.connect(cluster.spec) as c:
        t = c.table("emb")
        t.push(keys_of(81), np.ones(4, F32))
        req = t.pull_async(keys_of(81))
        results = ctx.Queue()
        p = ctx.Process(target=use_after_fork, args=(c, t, req, results))
        p.start()
        try:
            out = results.get(timeout=20)
        finally:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
        assert p.exitcode == 0
        for name in ("pull", "wait", "stats", "table"):
            assert "fork" in out[name], (name, out[name])
        assert out["closed"]
        # The parent's client is as it was.
        np.testing.assert_array_equal(req.wait(), np.ones((1, 4)))
        np.testing.assert_array_equal(t.pull(keys_of(81)), np.ones((1, 4)))


def test_threads_share_one_client(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("emb")
        k = keys_of(61, 62, 63)

        def work(i):
            for _ in range(50):
                t.push(k, np.ones((3, 4), F32))
                t.pull(k)
            return i

        with ThreadPoolExecutor(4) as ex:
            assert sorted(ex.map(work, range(4))) == [0, 1, 2, 3]
        np.testing.assert_array_equal(t.pull(k), np.full((3, 4), 200))


BSP = """
[table.bsp]
kind = sparse
dim = 2
updater = sum
consistency = bsp
"""


def test_bsp_clock_applies_each_iteration_once_and_barrier_joins(make_cluster):
    cl = make_cluster(BSP, cluster_lines="workers = 2\n")
    k = keys_of(1, 2, 3)
    with psclient.connect(cl.spec) as reader:
        with pytest.raises(psclient.InvalidError, match="not a worker"):
            reader.clock()
        with pytest.raises(psclient.InvalidError, match="not a worker"):
            reader.position()
        t = reader.table("bsp")

        def worker(i):
            seen = []
            with psclient.connect(cl.spec, worker=i,
                                  sync_timeout_ms=60000) as c:
                assert c.worker == i
                assert c.position() == (0, 0)
                tw = c.table("bsp")
                for step in range(1, 4):
                    tw.push(k, np.full((3, 2), i + 1, F32))
                    c.clock()
                    seen.append(tw.pull(k))
                c.barrier()
                assert c.position() == (3, 1)
            return seen

        with ThreadPoolExecutor(2) as ex:
            f0 = ex.submit(worker, 0)
            # Nothing is applied before both workers clocked.
            np.testing.assert_array_equal(t.pull(k), np.zeros((3, 2)))
            f1 = ex.submit(worker, 1)
            seen = [f0.result(timeout=120), f1.result(timeout=120)]
        for s in seen:
            for step, got in enumerate(s, 1):
                np.testing.assert_array_equal(got, np.full((3, 2), 3 * step))
        np.testing.assert_array_equal(t.pull(k), np.full((3, 2), 9))


def test_a_second_threads_clock_is_refused_while_one_waits(make_cluster):
    """A worker's clocks are its own steps: a clock() from a second thread
    joined the one under way (or sent another), silently, so 601 calls
    from two threads moved a trial's worker 552 clocks. Refused now, and
    not only between the first thread's wait slices."""
    cl = make_cluster(BSP, cluster_lines="workers = 2\n")
    with psclient.connect(cl.spec, worker=0, sync_timeout_ms=60000) as w0, \
            psclient.connect(cl.spec, worker=1,
                             sync_timeout_ms=60000) as w1:
        with ThreadPoolExecutor(1) as ex:
            first = ex.submit(w0.clock)
            # Worker 1 has not clocked: the thread's clock waits, in
            # slices of its own library calls. (A fixed sleep let this
            # thread's call in first on a loaded machine: review.)
            deadline = time.monotonic() + 10
            while not w0._in_sync[0]:
                assert time.monotonic() < deadline, "the thread's clock"
                time.sleep(0.01)
            assert not first.done()
            for _ in range(3):
                with pytest.raises(psclient.InvalidError,
                                   match="another thread of this worker "
                                         "is in clock"):
                    w0.clock()
                time.sleep(0.12)        # past a slice of the first's wait
            w1.clock()
            first.result(timeout=60)
        assert w0.position() == (1, 0)
        _in_step(w0, w1, "clock")
        assert w0.position() == (2, 0)


def _in_step(w0, w1, call: str) -> None:
    """w1's clock() (or barrier()) in a thread and w0's here: each returns
    once both came."""
    with ThreadPoolExecutor(1) as ex:
        other = ex.submit(getattr(w1, call))
        getattr(w0, call)()
        other.result(timeout=60)


@pytest.mark.parametrize("call", ["clock", "barrier"])
def test_a_ctrl_c_that_lands_as_the_clock_completes_says_it_is_done(
        make_cluster, monkeypatch, call):
    """A Ctrl-C is raised as the library call that waited returns: one
    that lands as the clock completes lost its status, and clock() raised
    KeyboardInterrupt with the clock done, where the docstring says it is
    under way and the next call finishes it (a trial's user re-ran the
    loop one clock ahead of the other worker). The binding asks the
    library (ps_sync_outstanding), and the KeyboardInterrupt says the
    clock is done. Here the landing is made sure of: the library's
    function raises as it returns PS_OK."""
    cl = make_cluster(BSP, cluster_lines="workers = 2\n")
    k = keys_of(1, 2, 3)
    with psclient.connect(cl.spec, worker=0, sync_timeout_ms=60000) as w0, \
            psclient.connect(cl.spec, worker=1, sync_timeout_ms=60000) as w1:
        t0 = w0.table("bsp")
        name = "ps_clock_timeout" if call == "clock" else "ps_barrier_timeout"
        real = getattr(psclient._LIB, name)

        def landing(h, ms):
            st = real(h, ms)
            if st == psclient.PS_OK:
                raise KeyboardInterrupt
            return st

        t0.push(k, np.ones((3, 2), F32))
        with ThreadPoolExecutor(1) as ex:
            other = ex.submit(getattr(w1, call))
            monkeypatch.setattr(psclient._LIB, name, landing)
            with pytest.raises(KeyboardInterrupt) as got:
                getattr(w0, call)()
            monkeypatch.undo()
            other.result(timeout=60)
        assert str(got.value) == (f"{call} 1 completed as the interrupt "
                                  f"came: it is done, and the next {call}() "
                                  f"counts the next one"), str(got.value)
        at = (1, 0) if call == "clock" else (0, 1)
        assert w0.position() == at and w1.position() == at
        # The next call counts the next clock on both, in step.
        _in_step(w0, w1, call)
        assert w0.position() == tuple(2 * x for x in at)
        if call == "clock":
            np.testing.assert_array_equal(t0.pull(k), np.full((3, 2), 1))


@pytest.mark.parametrize("call", ["clock", "barrier"])
def test_ctrl_c_interrupts_a_clock_or_barrier_and_the_next_call_finishes_it(
        make_cluster, call):
    """clock() and barrier() blocked in the library, where no signal
    handler runs, until every worker came or sync_timeout_ms (10 min by
    default) passed: Ctrl-C did nothing meanwhile. They wait in slices now
    (ps_clock_timeout, ps_barrier_timeout); the one cut short stays under
    way, and the next call waits for it: it counts no second clock, and
    the iteration's pushes are applied once."""
    cl = make_cluster(BSP, cluster_lines="workers = 2\n")
    k = keys_of(1, 2, 3)
    with psclient.connect(cl.spec, worker=0, sync_timeout_ms=60000) as w0, \
            psclient.connect(cl.spec, worker=1, sync_timeout_ms=60000) as w1:
        t0, t1 = w0.table("bsp"), w1.table("bsp")
        t0.push(k, np.ones((3, 2), F32))
        old = signal.signal(signal.SIGALRM, _raise_interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            began = time.monotonic()
            with pytest.raises(_Interrupt):
                getattr(w0, call)()              # worker 1 is not there
            assert time.monotonic() - began < 5
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        at = (1, 0) if call == "clock" else (0, 1)
        assert w0.position() == at
        t1.push(k, np.full((3, 2), 2, F32))
        _in_step(w0, w1, call)                   # w0's finishes the one cut short
        assert w0.position() == at and w1.position() == at
        if call == "clock":
            np.testing.assert_array_equal(t0.pull(k), np.full((3, 2), 3))
        # Both go on in step.
        _in_step(w0, w1, call)
        assert w0.position() == tuple(2 * x for x in at)
        if call == "clock":
            np.testing.assert_array_equal(t0.pull(k), np.full((3, 2), 3))


ADAGRAD = """
[table.steps]
kind = sparse
dim = 1
updater = adagrad
lr = 0.5
init = zeros

[table.sum_first]
kind = sparse
dim = 1
updater = adagrad
lr = 0.5
init = zeros

[table.bsp]
kind = sparse
dim = 1
updater = adagrad
lr = 0.5
init = zeros
consistency = bsp
"""


def test_a_repeated_key_takes_a_step_each_except_on_a_bsp_table(
        make_cluster):
    """client/psclient.h: a push applies each occurrence of a key in turn,
    but on a bsp table a clock's pushes are summed per key first,
    duplicates included. Table.push's docstring said each occurrence
    takes its own optimizer step, bsp tables too."""
    cl = make_cluster(ADAGRAD, cluster_lines="workers = 1\n")
    twice = keys_of(1, 1)
    ones = np.ones(2, F32)
    with psclient.connect(cl.spec, worker=0) as c:
        c.table("steps").push(twice, ones)       # two steps of 1
        c.table("sum_first").push(keys_of(1), np.full(1, 2, F32))
        c.table("bsp").push(twice, ones)
        c.clock()
        steps, summed, bsp = (c.table(n).pull(keys_of(1))
                              for n in ("steps", "sum_first", "bsp"))
    assert steps != summed
    np.testing.assert_array_equal(bsp, summed)
    doc = " ".join(psclient.Table.push.__doc__.split())
    assert "bsp" in doc and "summed per key first" in doc

def test_clock_on_an_async_cluster_is_invalid(cluster):
    with psclient.connect(cluster.spec, worker=0) as c:
        with pytest.raises(psclient.InvalidError, match="no bsp or ssp"):
            c.clock()


SSP = """
[table.ssp]
kind = sparse
dim = 1
updater = sum
consistency = ssp
staleness = 0
"""


def test_gil_is_released_while_a_pull_is_held(make_cluster):
    """Worker 0 is a clock ahead, so with staleness 0 its pull is held on
    the servers until worker 1 clocks. That clock comes from this Python
    thread while the pull blocks in another: it could never be made if the
    pull held the GIL (the pull would end only at sync_timeout_ms)."""
    cl = make_cluster(SSP, cluster_lines="workers = 2\n")
    k = keys_of(5)
    with psclient.connect(cl.spec, worker=0, sync_timeout_ms=20000) as w0, \
            psclient.connect(cl.spec, worker=1, sync_timeout_ms=20000) as w1:
        t0 = w0.table("ssp")
        t0.push(k, np.ones(1, F32))
        w0.clock()                               # worker 0 at clock 1
        started = threading.Event()
        result = {}

        def held_pull():
            started.set()
            try:
                result["rows"] = t0.pull(k)
            except BaseException as e:           # reported below
                result["error"] = e

        counter = [0]
        stop = threading.Event()

        def count():
            while not stop.is_set():
                counter[0] += 1

        puller = threading.Thread(target=held_pull)
        counting = threading.Thread(target=count)
        puller.start()
        counting.start()
        try:
            assert started.wait(10)
            time.sleep(0.5)                      # let the pull reach psd
            before = counter[0]
            time.sleep(0.2)
            assert puller.is_alive(), f"the pull was not held: {result}"
            assert counter[0] > before           # Python ran meanwhile
            w1.clock()                           # releases the pull
            puller.join(30)
        finally:
            stop.set()
            counting.join()
        assert not puller.is_alive()
        assert "error" not in result, result.get("error")
        np.testing.assert_array_equal(result["rows"], [[1]])


# ---- failures ---------------------------------------------------------------

def test_done_polls_a_request_without_waiting(make_cluster):
    # done read only whether a status had been read: a trainer polling
    # it to overlap work saw False for good (a newcomer's trial).
    cl = make_cluster()
    with psclient.connect(cl.spec) as c:
        d = c.table("dense")
        cl.signal(1, signal.SIGSTOP)
        try:
            req = d.push_range_async(0, np.ones((100, 3), F32))
            time.sleep(0.2)
            assert not req.done                  # node 1 has not answered
        finally:
            cl.signal(1, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while not req.done:
            assert time.monotonic() < deadline, "never done"
            time.sleep(0.01)
        assert req.wait() is None
        np.testing.assert_array_equal(d.pull_range(0, 100),
                                      np.ones((100, 3)))


def test_failures_no_one_read_are_said_when_a_client_is_dropped(
        make_cluster, capfd):
    """A client dropped (or still open at the interpreter's end) waits for
    its requests; those that failed, which no one can read any more, are
    said in a RuntimeWarning. A trial's 50 pushes to a stopped node failed
    at exit with not a word."""
    cl = make_cluster()
    c = psclient.connect(cl.spec, request_timeout_ms=300, max_retries=0)
    d = c.table("dense")
    d.push_range(0, np.ones((100, 3), F32))
    cl.signal(1, signal.SIGSTOP)
    try:
        for _ in range(3):
            d.push_range_async(0, np.ones((100, 3), F32))   # dropped
        was = gc.isenabled()
        gc.disable()
        try:
            with pytest.warns(RuntimeWarning,
                              match=r"3 request\(s\) whose status no one "
                                    r"had read: 3 failed") as got:
                del c, d
        finally:
            if was:
                gc.enable()
        assert "request_timeout_ms" in str(got[0].message) or \
            "bounded time" in str(got[0].message), str(got[0].message)
    finally:
        cl.signal(1, signal.SIGCONT)
    # None said when every request succeeded (recorded, not raised: the
    # warning's own failure would be written to stderr instead).
    capfd.readouterr()
    c = psclient.connect(cl.spec)
    c.table("dense").push_range_async(0, np.ones((1, 3), F32))
    gone = weakref.ref(c)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        del c
        gc.collect()
        assert gone() is None, "the client was not closed here"
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)]
    assert "psclient:" not in capfd.readouterr().err


def test_a_frozen_server_surfaces_as_timeout_error(make_cluster):
    cl = make_cluster()
    with psclient.connect(cl.spec, request_timeout_ms=300, max_retries=0,
                          connect_timeout_ms=300) as c:
        d = c.table("dense")
        d.push_range(0, np.ones((100, 3), F32))
        cl.signal(1, signal.SIGSTOP)
        try:
            with pytest.raises(psclient.TimeoutError) as e:
                d.pull_range(0, 100)             # rows on both nodes
            assert isinstance(e.value, builtins.TimeoutError)
            assert e.value.code == psclient.PS_ETIMEDOUT
            assert "PS_ETIMEDOUT" in str(e.value) and e.value.message
            req = d.pull_range_async(0, 100)
            with pytest.raises(psclient.TimeoutError):
                req.wait()
            with pytest.raises(psclient.TimeoutError):
                c.wait_all()                     # the errors since connect
            unread = d.pull_range_async(0, 100)
            with pytest.raises(psclient.TimeoutError):
                c.wait_all()                     # this one's
            assert unread.done
            with pytest.raises(psclient.TimeoutError):
                unread.wait()
        finally:
            cl.signal(1, signal.SIGCONT)
        # The node is back: the client talks to it again.
        np.testing.assert_array_equal(d.pull_range(0, 100),
                                      np.ones((100, 3)))


NONFINITE = """
[table.fin]
kind = sparse
dim = 2
updater = sum
nonfinite = reject
"""


def test_a_status_read_after_1024_later_failures_is_no_longer_known(
        make_cluster):
    """The library remembers the last 1024 failures (client/psclient.h,
    ps_wait): a request read after more failed is InvalidError, never a
    false success, as Request.wait() says. Each call reads the statuses
    of dropped requests that completed, oldest first, up to the first
    still in flight: one held by a frozen node keeps the reading back."""
    cl = make_cluster(NONFINITE)
    with psclient.connect(cl.spec, request_timeout_ms=30000) as c:
        t = c.table("fin")
        k = keys_of(1)
        nan = np.array([np.nan, 0], F32)
        # A key on the other node than key 1's.
        c.reset_stats()
        t.pull(k)
        home = 0 if c.stats(node=0).get("pull") else 1
        other = next(x for x in range(2, 200)
                     if (c.reset_stats(), t.pull(keys_of(x)),
                         c.stats(node=1 - home).get("pull"))[2])
        cl.signal(1 - home, signal.SIGSTOP)
        try:
            held = t.pull_async(keys_of(other))    # in flight until thawed
            first = t.push_async(k, nan)
            for _ in range(1024):
                with pytest.raises(psclient.NonFiniteError):
                    t.push(k, nan)
            with pytest.raises(psclient.InvalidError, match="no longer known"):
                first.wait()
        finally:
            cl.signal(1 - home, signal.SIGCONT)
        # held's status is no longer known either (1024 failures numbered
        # after it), whatever it was: not tested here.
        del held
        recent = t.push_async(k, nan)
        with pytest.raises(psclient.NonFiniteError):
            recent.wait()


def test_a_dropped_requests_status_is_read_by_the_calls_after_it(cluster):
    """A request that completed is read by the next call, blocking or
    not, so its status stays known however many fail after it (blocking
    calls read none, and 1024 failures later it was no longer known)."""
    cl = cluster
    with psclient.connect(cl.spec) as c:
        d = c.table("dense")
        first = d.push_range_async(0, np.full((100, 3), np.nan, F32))
        time.sleep(0.3)
        nan = np.full((1, 3), np.nan, F32)
        for _ in range(1100):
            with pytest.raises(psclient.NonFiniteError):
                d.push_range(0, nan)
        with pytest.raises(psclient.NonFiniteError):
            first.wait()


def test_a_refused_push_across_nodes_is_refused_on_every_node(make_cluster):
    """A node that finds a NaN refuses its part of the push, and the
    library sends the other node's part only once the first was applied:
    nothing of the push is applied anywhere, as NonFiniteError says."""
    cl = make_cluster(NONFINITE.replace("updater = sum",
                                        "updater = sum\ninit = zeros"))
    with psclient.connect(cl.spec) as c:
        t = c.table("fin")
        k = np.arange(64, dtype=U64)             # keys on both nodes
        g = np.ones((64, 2), F32)
        g[0, 0] = np.nan
        with pytest.raises(psclient.NonFiniteError) as e:
            t.push(k, g)
        assert "applied in part" not in e.value.message
        assert "not sent" in e.value.message
        applied = int((t.pull(k)[:, 0] == 1).sum())
        assert applied == 0
        doc = " ".join(psclient.NonFiniteError.__doc__.split())
        assert "refused whole, on every node" in doc


def test_a_nan_push_to_nodes_that_disagree_on_nonfinite_is_applied_in_part(
        make_cluster):
    """client/psclient.h, PS_ENONFINITE: only while a SIGHUP has set
    nonfinite differently on some nodes can a node that allows such values
    apply its part; the error's text then says "applied in part".
    NonFiniteError's docstring said the push is refused whole, with no
    such case."""
    cl = make_cluster(NONFINITE.replace("updater = sum",
                                        "updater = sum\ninit = zeros"))
    with psclient.connect(cl.spec) as c:
        t = c.table("fin")
        k = np.arange(64, dtype=U64)             # keys on both nodes
        c.reset_stats()
        t.pull(k[:1])
        home = 0 if c.stats(node=0).get("pull") else 1
        # The node of key 0 now takes NaNs; the other still refuses them.
        with open(cl.ini) as f:
            text = f.read()
        with open(cl.ini, "w") as f:
            f.write(text.replace("nonfinite = reject", "nonfinite = allow"))
        cl.signal(home, signal.SIGHUP)
        for _ in range(500):
            if "reloaded" in cl.log(home):
                break
            time.sleep(0.01)
        assert "reloaded" in cl.log(home), cl.log(home)
        g = np.full((64, 2), np.nan, F32)        # a NaN for every node
        with pytest.raises(psclient.NonFiniteError) as e:
            t.push(k, g)
        assert "applied in part" in e.value.message
        assert np.isnan(t.pull(k[:1])).all()     # key 0's node applied it
    doc = " ".join(psclient.NonFiniteError.__doc__.split())
    assert "SIGHUP" in doc and "applied in part" in doc


def test_closed_client_refuses_calls_and_still_answers_requests(cluster):
    with psclient.connect(cluster.spec) as c:
        t = c.table("emb")
        out = np.zeros((1, 4), F32)
        t.push(keys_of(71), np.ones((1, 4), F32))
        req = t.pull_async(keys_of(71), out=out)
        assert not c.closed
    assert c.closed
    assert req.wait() is out and (out == 1).all()      # read at close
    with pytest.raises(psclient.ClosedError):
        t.pull(keys_of(71))
    with pytest.raises(psclient.ClosedError):
        c.table("dense")
    c.close()                                           # twice: no-op


def test_stats_of_a_node_beyond_c_int_is_refused_not_node_0(cluster):
    """ctypes cuts an int to the C int's 32 bits: node 2**32 used to read
    node 0's statistics, and 2**64 raised ctypes.ArgumentError."""
    with psclient.connect(cluster.spec) as c:
        c.table("emb").push(keys_of(1), np.ones(4, F32))
        for node in (1 << 32, (1 << 32) + 1, -(1 << 32), 1 << 64):
            with pytest.raises(psclient.InvalidError, match=f"node {node}"):
                c.stats(node=node)
        with pytest.raises(TypeError, match="node: expected an int"):
            c.stats(node="0")


def test_a_stats_error_does_not_carry_an_earlier_failures_text(cluster):
    """The error of stats(node=7) used to carry the text of whatever failed
    before it (ps_stats_node did not set ps_last_error; now it does)."""
    with psclient.connect(cluster.spec) as c:
        with pytest.raises(psclient.KeyError):
            c.table("dense").pull_range(99, 2)
        with pytest.raises(psclient.InvalidError) as e:
            c.stats(node=7)
        assert "dense" not in e.value.message
        assert "node 7" in e.value.message


def test_strings_with_a_nul_are_refused_not_cut_short(cluster):
    """C reads a string up to its first NUL: table("emb\\0junk") used to
    return table emb, and a server list or token was cut as silently."""
    with psclient.connect(cluster.spec) as c:
        with pytest.raises(ValueError, match="name: .*NUL"):
            c.table("emb\0junk")
        assert "emb\0junk" not in c._tables
    with pytest.raises(ValueError, match="servers_or_ini: .*NUL"):
        psclient.connect(cluster.spec + "\0junk")
    with pytest.raises(ValueError, match="auth_token: .*NUL"):
        psclient.connect(cluster.spec, auth_token="a" * 20 + "\0junk")


def test_a_name_or_token_that_is_no_string_raises_type_error(cluster):
    """bytes(3) is three NULs: table(3) used to say "name: 3 holds a NUL
    character", and a token given as an int the same."""
    with psclient.connect(cluster.spec) as c:
        for bad in (3, 2.5, None, ["emb"]):
            with pytest.raises(TypeError, match="name: expected a str"):
                c.table(bad)
    with pytest.raises(TypeError, match="auth_token: expected a str"):
        psclient.connect(cluster.spec, auth_token=12345678901234567890)


def test_a_table_looked_up_before_close_is_refused_after_it(cluster):
    """table() answered from its cache without looking at the client: a
    closed client handed out a Table whose calls could only fail."""
    c = psclient.connect(cluster.spec)
    c.table("emb")
    c.close()
    with pytest.raises(psclient.ClosedError):
        c.table("emb")

class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("call", ["pull_range", "pull_range_async"])
def test_an_exception_from_a_signal_as_a_call_returns_keeps_its_arrays(
        make_cluster, call):
    """A signal handler that raises (Ctrl-C: KeyboardInterrupt) runs as
    soon as the library call it interrupted returns, before the binding
    has seen the request's timestamp. The request is in flight all the
    same: its out array used to be let go with the exception, and the
    library would write into freed memory when the answer came."""
    cl = make_cluster()
    with psclient.connect(cl.spec, max_inflight_bytes=1,
                          request_timeout_ms=1500, max_retries=0,
                          connect_timeout_ms=1000) as c:
        d = c.table("dense")
        d.pull_range(0, 100)                     # both nodes answer
        with _frozen_with_alarm(cl):
            first = d.pull_range_async(0, 100)   # held by node 1
            out = np.zeros((100, 3), F32)
            alive = weakref.ref(out)
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            # Blocks on max_inflight_bytes until `first` times out; the
            # handler raises as it returns, with this pull sent to node 1.
            with pytest.raises(_Interrupt):
                getattr(d, call)(0, 100, out=out)
            del out
            gc.collect()
            assert alive() is not None, "the in-flight out was freed"
            with pytest.raises(psclient.TimeoutError):
                first.wait()
        with pytest.raises(psclient.TimeoutError):
            c.wait_all()
        gc.collect()
        assert alive() is None                   # released once complete


def test_ctrl_c_in_an_async_call_held_by_1024_unread_issues_nothing(
        make_cluster):
    """With 1024 requests unread, an *_async call first waits for the
    oldest (memory stays bounded however many handles are dropped). That
    wait came after the call had issued its own request: a Ctrl-C there
    raised with the request in flight and its handle lost. The wait now
    comes first, so the interrupted call issues nothing."""
    cl = make_cluster()
    with psclient.connect(cl.spec, request_timeout_ms=20000, max_retries=0,
                          connect_timeout_ms=1000) as c:
        d = c.table("dense")
        d.pull_range(0, 100)                     # both nodes answer
        with _frozen_with_alarm(cl):
            held = d.pull_range_async(0, 100)    # held by node 1
            for _ in range(1023):                # row 0: node 0 answers
                d.pull_range_async(0, 1)
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(_Interrupt):
                d.pull_range_async(0, 1)         # waits for held
        # Nothing was issued by the interrupted call: the next request is
        # numbered right after the last one that returned a handle.
        nxt = d.pull_range_async(0, 1)
        assert nxt.ts == held.ts + 1024, (held.ts, nxt.ts)
        c.wait_all()


@pytest.mark.parametrize("how", ["pull", "wait", "wait_all"])
def test_ctrl_c_interrupts_a_wait_for_a_stopped_node(make_cluster, how):
    """A wait for a node that does not answer (stopped, or a slow bsp
    peer) blocked in the library, where no signal handler runs, until the
    request's time was up (request_timeout_ms x (max_retries + 1), 30 s
    by default): Ctrl-C did nothing for that long. The binding now waits
    in slices of 100 ms (ps_wait_timeout), and the request stays in
    flight, its arrays kept, until it completes."""
    cl = make_cluster()
    with psclient.connect(cl.spec, request_timeout_ms=20000, max_retries=0,
                          connect_timeout_ms=1000) as c:
        d = c.table("dense")
        d.pull_range(0, 100)                     # both nodes answer
        with _frozen_with_alarm(cl):
            out = np.zeros((100, 3), F32)
            alive = weakref.ref(out)
            t0 = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            # Before, the wait ended only with the node's presumed death
            # after 4 s (peer_timeout_ms), and the alarm's exception came
            # then: the time is what tells the two apart.
            with pytest.raises(_Interrupt):
                if how == "pull":
                    d.pull_range(0, 100, out=out)
                else:
                    req = d.pull_range_async(0, 100, out=out)
                    req.wait() if how == "wait" else c.wait_all()
            waited = time.monotonic() - t0
            assert waited < 3, f"Ctrl-C took {waited:.1f} s to interrupt"
            del out
            gc.collect()
            assert alive() is not None, "the in-flight out was freed"
        c.wait_all()                             # node 1 answers now
        if how != "pull":
            np.testing.assert_array_equal(req.wait(), np.zeros((100, 3)))
            del req                              # it hands out `out`
        gc.collect()
        assert alive() is None                   # released once complete


def _raise_interrupt(signum, frame):
    raise _Interrupt()


def test_another_threads_wait_does_not_put_a_ctrl_c_aside(make_cluster):
    """A Ctrl-C in one thread's wait, then another thread's wait that ends
    (here failing): the user still wants out, and the client dropped at
    the end closes without waiting or warning (a review: it waited for
    and warned of requests a stopped node held)."""
    cl = make_cluster()
    c = psclient.connect(cl.spec, request_timeout_ms=500, max_retries=0,
                         connect_timeout_ms=1000)
    d = c.table("dense")
    d.pull_range(0, 100)                         # both nodes answer
    cl.signal(1, signal.SIGSTOP)
    try:
        def other() -> None:
            with pytest.raises(psclient.TimeoutError):
                d.pull_range(0, 100)             # held by node 1
        t = threading.Thread(target=other)
        t.start()
        old = signal.signal(signal.SIGALRM, _raise_keyboard_interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(KeyboardInterrupt):
                d.pull_range(0, 100)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        t.join()                                 # its wait ended
        for _ in range(3):
            d.push_range_async(0, np.ones((100, 3), F32))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            del c, d
            gc.collect()
        assert not [w for w in seen
                    if issubclass(w.category, RuntimeWarning)], \
            [str(w.message) for w in seen]
    finally:
        cl.signal(1, signal.SIGCONT)


@pytest.mark.skipif(not os.path.exists("/usr/bin/strace"),
                    reason="needs strace (its syscall delays)")
def test_a_refused_port_is_refused_when_the_io_thread_is_late():
    """A refusal the kernel has given while the I/O thread was held past
    connect_timeout_ms (a loaded host) is read before the attempt is timed
    out: libuv runs its timers before it polls, and the open said "no
    answer within 50 ms" with TimeoutError (a trial: 7 of 400 opens with
    connect_timeout_ms = 50). strace holds the thread 80 ms in connect()."""
    from psdcluster import free_port
    port = free_port()
    code = textwrap.dedent(f"""\
        import psclient
        try:
            psclient.connect("127.0.0.1:{port}", connect_timeout_ms=50)
        except psclient.Error as e:
            print(type(e).__name__, e)
        """)
    got = subprocess.run(["/usr/bin/strace", "-f", "-o", "/dev/null", "-e",
                          "inject=connect:delay_exit=80000", sys.executable,
                          "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert got.stdout.startswith("ConnectionError "), got.stdout + got.stderr
    assert "connection refused" in got.stdout, got.stdout
    assert "within 50 ms of dialling" not in got.stdout, got.stdout


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt()


def test_a_wait_that_ends_after_a_caught_ctrl_c_lets_exit_wait_again(
        make_cluster):
    """A Ctrl-C cuts a wait short; a dropped client then closes without
    waiting, since the user wants out. But a trainer that caught it and
    went on (a wait that then ended) lost the pushes it issued afterwards
    at the script's end, cut off mid-way with not a word (a trial): the
    flag stayed for the client's life."""
    cl = make_cluster()
    c = psclient.connect(cl.spec, request_timeout_ms=20000, max_retries=0,
                         connect_timeout_ms=1000)
    d = c.table("dense")
    d.pull_range(0, 100)                         # both nodes answer
    cl.signal(1, signal.SIGSTOP)
    old = signal.signal(signal.SIGALRM, _raise_keyboard_interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            d.pull_range(0, 100)                 # held by node 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        cl.signal(1, signal.SIGCONT)
    c.wait_all()                                 # recovered: all answered
    # Node 1 holds the next pushes for a moment: a close that does not
    # wait would fail them.
    cl.signal(1, signal.SIGSTOP)
    resume = threading.Timer(0.5, cl.signal, (1, signal.SIGCONT))
    resume.start()
    try:
        for i in (1, 2, 3):
            d.push_range_async(0, np.full((100, 3), i, F32))
        del c, d
        gc.collect()
    finally:
        resume.join()
    with psclient.connect(cl.spec) as c:
        np.testing.assert_array_equal(c.table("dense").pull_range(0, 100),
                                      np.full((100, 3), 6, F32))


@contextlib.contextmanager
def _frozen_with_alarm(cl):
    """Node 1 stopped (SIGSTOP) and SIGALRM raising _Interrupt (a Ctrl-C
    the test times with setitimer) for the block; both undone after it,
    the alarm disarmed first."""
    cl.signal(1, signal.SIGSTOP)
    old = signal.signal(signal.SIGALRM, _raise_interrupt)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        cl.signal(1, signal.SIGCONT)


def close_interrupted(spec: str, frozen_pid: int) -> None:
    """The child of the test below: a worker whose close() is interrupted
    by a raising signal handler, then closed again."""
    c = psclient.connect(spec, worker=0, request_timeout_ms=1000,
                         max_retries=0, connect_timeout_ms=1000)
    c.table("dense").pull_range(0, 100)      # both nodes answer
    os.kill(frozen_pid, signal.SIGSTOP)
    signal.signal(signal.SIGALRM, _raise_interrupt)
    try:
        # ps_close waits for the frozen node's answer to the worker's
        # goodbye (a second, then PS_ETIMEDOUT); the alarm comes meanwhile
        # and its handler raises as ps_close returns.
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(_Interrupt):
            c.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.kill(frozen_pid, signal.SIGCONT)
    assert c.closed
    c.close()                                # as __del__ would
    with pytest.raises(psclient.ClosedError):
        c.table("emb")


def test_a_close_interrupted_as_ps_close_returns_does_not_free_twice(cluster):
    """The handler's exception came after ps_close had freed the client
    but before close() forgot its handle: the next close() (or __del__)
    handed the freed client to ps_wait_all and ps_close again (glibc:
    "corrupted size vs. prev_size", abort). In a process of its own, so
    that such a crash fails this test only."""
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=close_interrupted,
                    args=(cluster.spec, cluster.procs[1].pid))
    p.start()
    p.join(60)
    assert p.exitcode == 0


def test_a_close_interrupted_before_ps_close_leaves_the_client_open(
        make_cluster):
    """A signal handler that raised while close() waited for the requests
    left the client half closed for good: every call refused, and
    Request.wait() (in any thread) waiting for close() to read the status,
    which it never would. Nothing was closed, so the client stays open."""
    cl = make_cluster()
    c = psclient.connect(cl.spec, request_timeout_ms=1500, max_retries=0,
                         connect_timeout_ms=1000)
    try:
        d = c.table("dense")
        d.pull_range(0, 100)                     # both nodes answer
        with _frozen_with_alarm(cl):
            req = d.pull_range_async(0, 100)     # held by node 1
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(_Interrupt):
                c.close()                        # in ps_wait_all for req
        assert not c.closed
        waited = {}

        def wait():
            try:
                req.wait()
            except BaseException as e:
                waited["error"] = e

        w = threading.Thread(target=wait, daemon=True)
        w.start()
        w.join(10)
        assert not w.is_alive(), "Request.wait() hangs after the close"
        # The interrupt came while close() waited (in slices): the request
        # was still in flight, and completes now that node 1 runs again
        # (it timed out only if the machine stalled past its 1.5 s).
        assert (waited.get("error") is None or
                isinstance(waited["error"], psclient.TimeoutError))
        np.testing.assert_array_equal(d.pull_range(0, 2), np.zeros((2, 3)))
    finally:
        c.close()
    assert c.closed


def close_in_a_handler(spec: str, frozen_pid: int, during: str) -> None:
    """The child of the test below: a signal handler calls close() while
    this thread is in a call on the client (during == "call") or in
    close() itself (during == "close"), or Request.wait() while this
    thread is in close() (during == "wait")."""
    c = psclient.connect(spec, request_timeout_ms=1000, max_retries=0,
                         connect_timeout_ms=1000)
    d = c.table("dense")
    d.pull_range(0, 100)                     # both nodes answer
    seen = []
    req = None

    def handler(signum, frame):
        if during == "wait":
            try:
                req.wait()
            except psclient.TimeoutError:
                seen.append(True)
            return
        c.close()
        seen.append(c.closed)

    os.kill(frozen_pid, signal.SIGSTOP)
    signal.signal(signal.SIGALRM, handler)
    try:
        # The call waits a second for the frozen node; the alarm comes
        # meanwhile and its handler runs as the library call returns.
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        if during == "call":
            with pytest.raises(psclient.TimeoutError):
                d.pull_range(0, 100)
        else:
            req = d.pull_range_async(0, 100)  # held by the frozen node
            c.close()                        # in ps_wait_all for req
            with pytest.raises(psclient.TimeoutError):
                req.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.kill(frozen_pid, signal.SIGCONT)
    assert seen == [True]
    assert c.closed and c._h is None         # closed for real
    with pytest.raises(psclient.ClosedError):
        d.pull_range(0, 1)


@pytest.mark.parametrize("during", ["call", "close", "wait"])
def test_close_from_a_signal_handler_neither_hangs_nor_frees_twice(
        cluster, during):
    """A handler that closes the client (a SIGTERM handler that leaves the
    training, say) runs in the middle of whatever the thread was doing.
    In the middle of a call on that client, close() waited for that very
    call to end: for ever. In the middle of close(), it closed the client
    and the outer close() went on with the freed handle; a Request.wait()
    there waited for that close() to end, for ever. In a process of
    its own, so that a hang or a crash fails this test only."""
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=close_in_a_handler,
                    args=(cluster.spec, cluster.procs[1].pid, during))
    p.start()
    p.join(30)
    if p.is_alive():
        p.kill()
        p.join()
        os.kill(cluster.procs[1].pid, signal.SIGCONT)
        pytest.fail("the child hung")
    assert p.exitcode == 0


def test_a_connect_interrupted_as_ps_open_returns_closes_its_client(
        make_cluster):
    """A signal handler that raises (Ctrl-C in a notebook while a node is
    slow to answer) runs as soon as ps_open returns, before connect() kept
    the handle: the client stayed open, unreachable, with its I/O thread
    and connections, and a worker's id stayed taken for the process's
    life, so connecting again as that worker was refused."""
    cl = make_cluster()
    cl.signal(1, signal.SIGSTOP)
    thaw = threading.Timer(0.8, cl.signal, (1, signal.SIGCONT))
    old = signal.signal(signal.SIGALRM, _raise_interrupt)
    try:
        thaw.start()
        # ps_open waits for the frozen node; the alarm comes meanwhile.
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(_Interrupt):
            psclient.connect(cl.spec, worker=0, connect_timeout_ms=5000)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        thaw.join()
    with psclient.connect(cl.spec, worker=0, connect_timeout_ms=3000) as c:
        assert c.worker == 0


def test_an_import_of_arrays_numpy_saved_starts_the_model(cluster,
                                                          tmp_path):
    """psd --import writes each node's first snapshot from files np.save
    wrote as the README shows (int64 keys, numpy's default): the rows come
    back as saved, those no file names at their init."""
    psd = os.environ["PSD_BIN"]
    for i in range(2):
        cluster.signal(i, signal.SIGTERM)
    for p in cluster.procs:
        assert p.wait(timeout=10) == 0
    for f in os.listdir(cluster.dir):
        if f.startswith("psd-node"):
            os.remove(os.path.join(cluster.dir, f))
    src = tmp_path / "model"
    src.mkdir()
    rows = np.arange(300, dtype=F32).reshape(100, 3) / 4
    np.save(src / "dense.npy", rows)
    ids = [3, 1 << 40, 77, 12345]
    vecs = -np.arange(16, dtype=F32).reshape(4, 4)
    np.save(src / "emb.npy", vecs)
    np.save(src / "emb.keys.npy", np.array(ids))
    assert np.load(src / "emb.keys.npy").dtype == np.int64
    r = subprocess.run([psd, "--import", str(src), "-c", cluster.ini],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "table 'seeded': no " in r.stderr
    for i in range(2):
        cluster.procs[i] = cluster._start(i)
        cluster._wait_up(i)
    c = psclient.connect(cluster.spec)
    np.testing.assert_array_equal(c.table("dense").pull_range(0, 100), rows)
    np.testing.assert_array_equal(c.table("emb").pull(keys_of(*ids)), vecs)
    seeded = c.table("seeded").pull(keys_of(5, 6))
    assert ((seeded >= 1) & (seeded < 2)).all()
    c.close()


def test_an_export_of_the_final_snapshots_reads_back_every_row(cluster,
                                                                tmp_path):
    """psd --export writes the nodes' snapshots as .npy files and
    read_export puts them together: every dense row at its index, every
    sparse key with its row; a table never pushed has no rows. One node's
    export alone lacks the other's dense rows: refused unless partial."""
    psd = os.environ["PSD_BIN"]
    # Nothing to export yet (durability = snapshot, no snapshot): refused,
    # and no folder made.
    r = subprocess.run([psd, "--export", str(tmp_path / "none"), "-c",
                        cluster.ini], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "node 0: no snapshot and no journal" in r.stderr
    assert not (tmp_path / "none").exists()
    c = psclient.connect(cluster.spec)
    rows = np.arange(300, dtype=F32).reshape(100, 3)
    c.table("dense").push_range(0, rows)
    keys = keys_of(3, 1 << 40, 77, 12345)
    vals = np.arange(16, dtype=F32).reshape(4, 4)
    c.table("emb").push(keys, vals)
    c.close()
    for i in range(2):               # SIGTERM: each writes its final snapshot
        cluster.signal(i, signal.SIGTERM)
    for p in cluster.procs:
        assert p.wait(timeout=10) == 0
    out = tmp_path / "model"
    r = subprocess.run([psd, "--export", str(out), "-c", cluster.ini],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "2 of 2 nodes written" in r.stderr
    m = psclient.read_export(out)
    assert sorted(m) == ["dense", "emb", "seeded"]
    np.testing.assert_array_equal(m["dense"], rows)
    k, v = m["emb"]
    assert k.dtype == U64 and v.dtype == F32 and v.shape == (4, 4)
    assert dict(zip(k.tolist(), v.tolist())) == {
        int(x): vals[i].tolist() for i, x in enumerate(keys)}
    assert m["seeded"][0].size == 0 and m["seeded"][1].shape == (0, 2)
    # The layout a psd before export.nodeN.json wrote (one export.json,
    # each table listing its nodes' files) reads the same: it said "not a
    # folder psd --export wrote".
    import shutil
    older = tmp_path / "older"
    shutil.copytree(out, older)
    per = [json.loads((older / f"export.node{i}.json").read_text())
           for i in range(2)]
    tables = {}
    for mf in per:
        for t in mf["tables"]:
            tables.setdefault(t["name"], dict(
                {k: t[k] for k in ("name", "kind", "dim", "rows",
                                   "updater")}, files=[]))["files"].append(
                {"node": mf["node"], "keys": t["keys"],
                 "values": t["values"], "count": t["count"]})
        (older / f"export.node{mf['node']}.json").unlink()
    (older / "export.json").write_text(json.dumps(
        {"format": 1, "ini": cluster.ini, "nodes": 2, "shards": per[0]["shards"],
         "snapshots": [dict(mf["snapshot"], node=mf["node"]) for mf in per],
         "tables": list(tables.values())}))
    # A byte of a file changed since (damage, or another export's file of
    # as many rows): read without a word; the manifest's CRC-32 tells.
    flipped = tmp_path / "flipped"
    shutil.copytree(out, flipped)
    for name in ("emb.node0.npy", "emb.node0.keys.npy"):
        f = flipped / name
        data = bytearray(f.read_bytes())
        data[-1] ^= 0x40
        f.write_bytes(bytes(data))
        with pytest.raises(ValueError, match=f"{name}: its data are not "
                           "what its export.nodeN.json lists"):
            psclient.read_export(flipped)
        data[-1] ^= 0x40
        f.write_bytes(bytes(data))
    o = psclient.read_export(older)
    assert sorted(o) == sorted(m)
    np.testing.assert_array_equal(o["dense"], rows)
    assert dict(zip(o["emb"][0].tolist(), o["emb"][1].tolist())) == dict(
        zip(k.tolist(), v.tolist()))
    # export.py alone (numpy only, no libpsclient) gathers it into a .npz.
    npz = tmp_path / "model.npz"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSCLIENT_LIB", "PYTHONPATH")}
    r = subprocess.run([sys.executable,
                        str(SRC / "python" / "psclient" / "export.py"),
                        str(out), str(npz)], capture_output=True, text=True,
                       timeout=60, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    z = np.load(npz)
    np.testing.assert_array_equal(z["dense"], rows)
    assert sorted(z["emb.keys"].tolist()) == sorted(keys.tolist())
    one = tmp_path / "one"
    r = subprocess.run([psd, "--export", str(one), "-c", cluster.ini,
                        "-n", "1"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    with pytest.raises(ValueError, match=r"nodes \[1\] of 2"):
        psclient.read_export(one)
    # So does export.py's command line, unless told --partial.
    cmd = [sys.executable, str(SRC / "python" / "psclient" / "export.py")]
    r = subprocess.run(cmd + [str(one), str(npz)], capture_output=True,
                       text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert r.returncode == 1 and "--partial" in r.stderr, r.stderr
    r = subprocess.run(cmd + ["--partial", str(one), str(npz)],
                       capture_output=True, text=True, timeout=60, env=env,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert np.isnan(np.load(npz)["dense"][:, 0]).sum() > 0
    part = psclient.read_export(one, partial=True)
    d = part["dense"]
    held = ~np.isnan(d[:, 0])
    assert 0 < held.sum() < 100
    np.testing.assert_array_equal(d[held], rows[held])
    assert set(part["emb"][0].tolist()) <= set(keys.tolist())
    # Node 0 exported into the same folder (as from another host): whole.
    r = subprocess.run([psd, "--export", str(one), "-c", cluster.ini,
                        "-n", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    both = psclient.read_export(one)
    np.testing.assert_array_equal(both["dense"], rows)
    assert sorted(both["emb"][0].tolist()) == sorted(keys.tolist())
    # A copy a file manager made is not a manifest (it made the export
    # "manifests of nodes [0, 0, 1]"); an empty manifest is named.
    shutil.copy(one / "export.node0.json", one / "export.node0 (copy).json")
    np.testing.assert_array_equal(psclient.read_export(one)["dense"], rows)
    (one / "export.node0 (copy).json").unlink()
    (one / "export.node1.json").write_text("")
    with pytest.raises(ValueError, match=r"export\.node1\.json: not a "
                       r"manifest psd --export wrote"):
        psclient.read_export(one)
    # A dense table added to the ini since the snapshots holds no trained
    # row: left out of the export, which still reads whole.
    with open(cluster.ini, "a") as f:
        f.write("\n[table.late]\nkind = dense\nrows = 5\ndim = 1\n")
    later = tmp_path / "later"
    r = subprocess.run([psd, "--export", str(later), "-c", cluster.ini],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "table 'late' is in" in r.stderr and "not exported" in r.stderr
    m = psclient.read_export(later)
    assert sorted(m) == ["dense", "emb", "seeded"]
    np.testing.assert_array_equal(m["dense"], rows)


@pytest.mark.parametrize("manifest", [
    {"tables": 5},
    {"nodes": "x"},
    {"shards": 0},
    {"tables": [{"name": "w", "dim": 2, "rows": 4, "keys": "k.npy",
                 "values": "v.npy", "count": 0}]},          # no kind
    {"tables": [{"name": "w", "kind": "dense", "dim": "2", "rows": 4,
                 "keys": "k.npy", "values": "v.npy", "count": 0}]},
    {"tables": ["w"]},
    {"tables": [{"name": "w", "kind": "sparse", "dim": 1, "rows": 0,
                 "keys": "z.npz", "values": "z.npz", "count": 0}]},
    "nested past the parser",
])
def test_a_damaged_manifest_is_a_value_error(tmp_path, manifest):
    """A manifest of the wrong shape raised TypeError or KeyError from
    deep in read_export, and export.py's command line a traceback."""
    if isinstance(manifest, str):
        text = '{"format": 1, "tables": ' + "[" * 100000
    else:
        m = {"format": 1, "node": 0, "nodes": 1, "shards": 4, "tables": []}
        m.update(manifest)
        text = json.dumps(m)
    (tmp_path / "export.node0.json").write_text(text)
    np.savez(tmp_path / "z.npz", a=np.zeros(0, U64))   # not an .npy
    with pytest.raises(ValueError, match=r"(export\.node0\.json: not a "
                       r"manifest psd --export wrote)|(does not match its "
                       r"export\.nodeN\.json)"):
        psclient.read_export(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSCLIENT_LIB", "PYTHONPATH")}
    r = subprocess.run([sys.executable,
                        str(SRC / "python" / "psclient" / "export.py"),
                        str(tmp_path), str(tmp_path / "o.npz")],
                       capture_output=True, text=True, timeout=60, env=env,
                       cwd=str(tmp_path))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert ("not a manifest psd --export wrote" in r.stderr or
            "does not match its export.nodeN.json" in r.stderr)


def _small_export(where: Path, **change) -> Path:
    """An export folder of one node as psd --export writes it: a dense
    table w (2 rows of 1) and a sparse table e (keys 5 and 9); change
    replaces entries of e's manifest entry."""
    where.mkdir()
    np.save(where / "w.node0.keys.npy", np.array([0, 1], U64))
    np.save(where / "w.node0.npy", np.array([[1], [2]], F32))
    np.save(where / "e.node0.keys.npy", np.array([5, 9], U64))
    np.save(where / "e.node0.npy", np.array([[3], [4]], F32))
    e = {"name": "e", "kind": "sparse", "dim": 1, "rows": 0, "count": 2,
         "keys": "e.node0.keys.npy", "values": "e.node0.npy"}
    e.update(change)
    (where / "export.node0.json").write_text(json.dumps(
        {"format": 1, "node": 0, "nodes": 1, "shards": 4, "tables": [
            {"name": "w", "kind": "dense", "dim": 1, "rows": 2, "count": 2,
             "keys": "w.node0.keys.npy", "values": "w.node0.npy"}, e]}))
    return where


def _export_py(folder: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSCLIENT_LIB", "PYTHONPATH")}
    return subprocess.run([sys.executable,
                           str(SRC / "python" / "psclient" / "export.py"),
                           str(folder), str(tmp_path / "o.npz")],
                          capture_output=True, text=True, timeout=60,
                          env=env, cwd=str(tmp_path))


def test_an_export_folder_from_elsewhere_is_read_with_care(tmp_path):
    """An export folder someone hands over: a FIFO in a file's place hung
    read_export for good; a manifest naming a path read any .npy of the
    machine into the model; a sparse key given twice came back twice; a
    manifest's rows claimed memory before anything was checked (10^8 of
    them: 1.7 GB; partial=True still allocates them, as it must); a shape past 2^63 and a node of Infinity raised
    OverflowError (a traceback from export.py). Each is a ValueError now,
    and export.py's line says it."""
    m = psclient.read_export(_small_export(tmp_path / "good"))
    np.testing.assert_array_equal(m["w"], [[1], [2]])
    assert m["e"][0].tolist() == [5, 9]

    # The mark of a node psd --export was still writing (killed there).
    killed = _small_export(tmp_path / "killed")
    (killed / "export.node0.partial").write_text("")
    with pytest.raises(ValueError, match="holds export.node0.partial: psd "
                       "--export of node 0 did not finish"):
        psclient.read_export(killed)

    fifo = _small_export(tmp_path / "fifo")
    (fifo / "e.node0.npy").unlink()
    os.mkfifo(fifo / "e.node0.npy")
    with pytest.raises(ValueError, match="e.node0.npy: not a regular file"):
        psclient.read_export(fifo)
    r = _export_py(fifo, tmp_path)             # its own timeout: 60 s
    assert r.returncode == 1 and "not a regular file" in r.stderr, r.stderr
    (fifo / "e.node0.npy").unlink()
    np.save(fifo / "e.node0.npy", np.array([[3], [4]], F32))
    (fifo / "export.node0.json").rename(fifo / "m.json")
    os.mkfifo(fifo / "export.node0.json")
    with pytest.raises(ValueError, match="not a regular file"):
        psclient.read_export(fifo)

    np.save(tmp_path / "outside.npy", np.array([[7], [8]], F32))
    for name in ("../outside.npy", str(tmp_path / "outside.npy")):
        with pytest.raises(ValueError, match="not a manifest psd --export "
                           "wrote"):
            psclient.read_export(_small_export(tmp_path / f"p{len(name)}",
                                               values=name))

    twice = _small_export(tmp_path / "twice")
    np.save(twice / "e.node0.keys.npy", np.array([5, 5], U64))
    with pytest.raises(ValueError, match="sparse table 'e' has key 5 more "
                       "than once"):
        psclient.read_export(twice)
    assert psclient.read_export(twice, partial=True)["e"][0].tolist() == [5, 5]

    big = _small_export(tmp_path / "big")
    text = (big / "export.node0.json").read_text()
    (big / "export.node0.json").write_text(
        text.replace('"rows": 2', '"rows": 1000000000000'))
    with pytest.raises(ValueError, match="has 2 rows in this export and "
                       "1000000000000 in its manifests"):
        psclient.read_export(big)

    over = _small_export(tmp_path / "over")
    head = ("{'descr': '<f4', 'fortran_order': False, "
            "'shape': (18446744073709551664, 1), }")
    head += " " * (63 - (10 + len(head)) % 64) + "\n"
    (over / "e.node0.npy").write_bytes(
        b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") +
        head.encode() + bytes(8))
    with pytest.raises(ValueError, match="e.node0.npy"):
        psclient.read_export(over)
    r = _export_py(over, tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr

    # A keys file cut short is named as such (its values file was), and
    # a file that is no .npy at all is said so (numpy's "Cannot load
    # file containing pickled data").
    cut = _small_export(tmp_path / "cut")
    data = (cut / "e.node0.keys.npy").read_bytes()
    (cut / "e.node0.keys.npy").write_bytes(data[:-4])
    with pytest.raises(ValueError, match=r"table 'e': e\.node0\.keys\.npy: "):
        psclient.read_export(cut)
    (cut / "e.node0.keys.npy").write_bytes(data)
    (cut / "e.node0.npy").write_bytes(b"")
    with pytest.raises(ValueError, match=r"table 'e': e\.node0\.npy: not an "
                       r"\.npy file"):
        psclient.read_export(cut)

    older = _small_export(tmp_path / "older")
    (older / "export.node0.json").unlink()
    (older / "export.json").write_text(
        '{"format": 1, "nodes": 1, "shards": 4, "snapshots": [{"node": '
        'Infinity}], "tables": []}')
    with pytest.raises(ValueError, match="not a manifest psd --export wrote"):
        psclient.read_export(older)
    r = _export_py(older, tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr


def test_a_worker_let_go_hears_of_the_clocks_it_missed(make_cluster,
                                                       monkeypatch):
    """A worker whose connection was lost for longer than worker_grace
    rejoins at the cluster's clock, its calls succeeding: the library
    counts the clocks it missed (stats()["clocks_skipped"]; on stderr it
    is quiet for the binding), and the next clock() warns. The rejoin
    itself is tested from C (test_modes); here, the binding's part."""
    cl = make_cluster(ADAGRAD, cluster_lines="workers = 1\n")
    with psclient.connect(cl.spec, worker=0) as c:
        assert c.stats()["clocks_skipped"] == 0
        c.clock()                                 # nothing missed: quiet
        assert c.stats()["barriers_skipped"] == 0
        assert c._skipped() == 0                  # the two words, read
        monkeypatch.setattr(c, "_skipped", lambda: 3)
        with pytest.warns(RuntimeWarning, match=r"worker 0 rejoined the "
                          r"cluster .* moved on 3 in all, to the cluster's "
                          r"\(it is now at clock \d+\)"):
            c.clock()
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")        # said once
            c.clock()


_CTRL_C_CHILD = """
import signal, sys, numpy as np, psclient
signal.signal(signal.SIGINT, signal.default_int_handler)
spec, how = sys.argv[1], sys.argv[2]
if how == "with":
    with psclient.connect(spec, worker=0, sync_timeout_ms=120000) as c:
        t = c.table("ssp")
        c.clock()
        print("held", flush=True)
        t.pull(np.arange(8, dtype=np.uint64))   # worker 1 never clocks
else:
    c = psclient.connect(spec, worker=0, sync_timeout_ms=120000)
    c.clock()
    req = c.table("ssp").pull_async(np.arange(8, dtype=np.uint64))
    print("held", flush=True)
    c.close()                                   # waits for req
"""


def _ctrl_c_child(code: str, args: list, ready: str) -> None:
    """Runs Python code with args in a child, waits for it to print the
    line `ready`, sends it one SIGINT, and expects it to end of a
    KeyboardInterrupt within 60 s."""
    p = subprocess.Popen([sys.executable, "-c", code, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline() == ready + "\n", p.stderr.read()
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "KeyboardInterrupt" in err, err
    assert p.returncode != 0


_CONNECT_CHILD = """
import signal, sys, psclient
signal.signal(signal.SIGINT, signal.default_int_handler)
print("connecting", flush=True)
psclient.connect(sys.argv[1], connect_timeout_ms=120000)
"""


def test_ctrl_c_ends_a_connect_to_a_node_that_does_not_answer():
    """connect() waited in ps_open, where Python runs no signal handler:
    Ctrl-C did nothing until connect_timeout_ms (5 s by default, 120 s
    here) had passed. Now the connect waits in a thread of its own and
    the first Ctrl-C ends it."""
    import socket
    mute = socket.socket()       # takes connections, never answers
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    port = mute.getsockname()[1]
    try:
        # Before, it ended only after connect_timeout_ms (120 s).
        _ctrl_c_child(_CONNECT_CHILD, [f"127.0.0.1:{port}"], "connecting")
    finally:
        mute.close()


@pytest.mark.parametrize("how", ["with", "close"])
def test_one_ctrl_c_ends_a_worker_whose_pull_is_held(make_cluster, how):
    """Ctrl-C interrupted the held pull, then close() (from the with
    block's end, or __del__ at exit) waited for that same pull until
    sync_timeout_ms: it took three Ctrl-C's to end the program. Now close
    gives up on requests when Ctrl-C comes (ps_close_now): the program
    ends at the first, and the worker still leaves on every node, so the
    other workers are not held for worker_grace."""
    cl = make_cluster(SSP, cluster_lines="workers = 2\nworker_grace = 600\n")
    # Before, it ended only after sync_timeout_ms (120 s): past the bound.
    _ctrl_c_child(_CTRL_C_CHILD, [cl.spec, how], "held")
    for i in range(2):
        assert "worker 0 left" in cl.log(i), cl.log(i)


def test_close_without_waiting_fails_what_is_in_flight(make_cluster):
    """close(wait=False): a request a slow peer holds fails with
    ClosedError at once instead of being waited for; one already done
    keeps its result."""
    cl = make_cluster(SSP, cluster_lines="workers = 2\nworker_grace = 600\n")
    c = psclient.connect(cl.spec, worker=0, sync_timeout_ms=120000)
    t = c.table("ssp")
    keys = np.arange(8, dtype=np.uint64)
    done = t.push_async(keys, np.ones((8, 1), F32))
    done.wait()
    c.clock()
    held = t.pull_async(keys)
    time.sleep(0.3)
    c.close(wait=False)
    assert c.closed
    assert done.wait() is None
    with pytest.raises(psclient.ClosedError, match="without waiting"):
        held.wait()


def test_worker_true_is_not_worker_1(cluster):
    """operator.index takes True for 1: connect(worker=True) joined as
    worker 1, and pull_range(True, 1) read row 1."""
    with pytest.raises(TypeError, match="bool"):
        psclient.connect(cluster.spec, worker=True)
    with psclient.connect(cluster.spec) as c:
        with pytest.raises(TypeError, match="bool"):
            c.table("dense").pull_range(True, 1)


def test_close_without_waiting_ends_other_threads_waits(make_cluster):
    """close(wait=False) first waited for every other thread's running
    call: a thread in a pull a slow ssp peer held kept it (and Ctrl-C in
    a with block) for sync_timeout_ms. Their waits now end with
    ClosedError."""
    cl = make_cluster(SSP, cluster_lines="workers = 2\nworker_grace = 600\n")
    c = psclient.connect(cl.spec, worker=0, sync_timeout_ms=120000)
    t = c.table("ssp")
    keys = np.arange(8, dtype=np.uint64)
    c.clock()
    got = {}

    def pull():
        try:
            t.pull(keys)
            got["result"] = "answered"
        except psclient.Error as e:
            got["result"] = e

    th = threading.Thread(target=pull)
    th.start()
    time.sleep(0.5)                      # held: worker 1 never clocks
    c.close(wait=False)
    th.join(30)
    assert not th.is_alive()
    # Before, the pull ended with TimeoutError after sync_timeout_ms.
    assert isinstance(got["result"], psclient.ClosedError), got


def _node_1_stopped(cl, **options):
    """A client of cl (no retries, 1 s to connect, and options) and its
    table "dense", both nodes having answered it; then node 1 stopped
    (SIGSTOP: the caller sends SIGCONT, or the cluster's close does)."""
    c = psclient.connect(cl.spec, max_retries=0, connect_timeout_ms=1000,
                         **options)
    d = c.table("dense")
    d.pull_range(0, 100)                     # both nodes answer
    cl.signal(1, signal.SIGSTOP)
    return c, d


@pytest.mark.parametrize("worker", [-1, 0])
def test_a_waiting_close_neither_holds_other_threads_nor_a_watchdog(
        make_cluster, worker):
    """close() held the client's lock while it waited for requests: every
    other thread's call queued behind it (for request_timeout_ms here, up
    to sync_timeout_ms for a held pull) before failing with ClosedError,
    and a close(wait=False) from a watchdog thread could not end the
    wait. Now the calls fail at once and the watchdog's close ends it.
    A worker's goodbye (LEAVE) then still waits for node 1, up to
    request_timeout_ms, but without the lock: calls fail at once then
    too."""
    cl = make_cluster(cluster_lines="workers = 1\n" if worker >= 0 else "")
    c, d = _node_1_stopped(cl, request_timeout_ms=4000, worker=worker)
    try:
        held = d.pull_range_async(0, 100)    # node 1 holds it
        closing = threading.Thread(target=c.close)
        closing.start()
        deadline = time.monotonic() + 10
        while not c.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)                      # in its wait for `held`
        assert closing.is_alive()
        t0 = time.monotonic()
        with pytest.raises(psclient.ClosedError):
            d.pull_range(0, 2)
        # Before: 4 s, when the close's wait for `held` ended (a bound
        # that far from both, so that a loaded machine does not fail it).
        assert time.monotonic() - t0 < 2.5
        got = {}

        def watchdog():
            t0 = time.monotonic()
            c.close(wait=False)
            got["closed"] = time.monotonic() - t0

        w = threading.Thread(target=watchdog)
        w.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        with pytest.raises(psclient.ClosedError):
            d.pull_range(0, 2)               # during a worker's goodbye
        assert time.monotonic() - t0 < 2.5
        w.join(10)
        closing.join(10)
        assert not w.is_alive() and not closing.is_alive()
        # A reader's close is over at once; a worker's waits for its
        # goodbye to node 1 (request_timeout_ms), not for `held` first.
        assert got["closed"] < (2.5 if worker < 0 else 6), got
        with pytest.raises(psclient.ClosedError, match="without waiting"):
            held.wait()
    finally:
        cl.signal(1, signal.SIGCONT)


@pytest.mark.parametrize("wait", [True, False])
def test_ctrl_c_at_any_line_of_a_close_leaves_the_client_whole(
        cluster, monkeypatch, wait):
    """A KeyboardInterrupt raised at each line with a call that close()
    runs, a push in flight (as a signal handler's would be, as such a
    call begins or after the one before it returned) leaves the client
    either open, its close to be tried again, or closed, the library's
    client closed exactly once, after it was done with the push's array:
    never half closed. So does one raised as each call close() makes
    returns. (Not tried: a second interrupt, or one inside the functions
    close() calls.) Before, one just after close() took
    the close over, or just before it let go of the handle, left it
    claimed by that close for good (a retried close() returned at once,
    the library's client never closed; another thread's close() and
    Request.wait() waited for ever)."""
    # Where a signal handler can run in close(): as a call returns, or as
    # a Python function it calls (a lock's __enter__, say) begins; so the
    # lines with a call (one raised before a line of plain assignments
    # would be one raised after the previous call, which is tried too).
    # _end_close, where close() ends once it let go of the handle, too.
    # Not the lines marked "no handler here": calls of the library's C
    # functions right after a plain assignment, where CPython runs no
    # handler (the wrappers this test puts around them would).
    codes = {f.__code__: f for f in (psclient.Client.close,
                                     psclient.Client._end_close)}
    with_calls = set()
    for f in codes.values():
        src = textwrap.dedent(inspect.getsource(f))
        text = src.splitlines()
        first = f.__code__.co_firstlineno - 1
        for node in ast.walk(ast.parse(src)):
            if (isinstance(node, (ast.Call, ast.With)) and
                    "no handler here" not in text[node.lineno - 1]):
                with_calls.add((f.__code__, first + node.lineno))
    calls = []
    # The array of a push in flight (node 1 is slow to answer): alive,
    # whoever holds it, until the library's close has returned.
    out_alive = [lambda: None, 0]        # its weakref, its timestamp
    wait_timeout = psclient._LIB.ps_wait_timeout

    def closing(h, real):
        calls.append(h)
        if wait_timeout(h, out_alive[1], 0) == psclient.PS_PENDING:
            assert out_alive[0]() is not None, \
                "the array of a request in flight freed before the close"
        return real(h)

    for name in ("ps_close", "ps_close_now"):
        real = getattr(psclient._LIB, name)
        monkeypatch.setattr(psclient._LIB, name,
                            lambda h, real=real: closing(h, real))

    def lines_run(target=None, returns=None):
        """Closes a new client, raising KeyboardInterrupt at line `target`,
        or as the returns-th call made from close() or _end_close()
        returns (a C function's, or a Python one's as it returns to
        them); returns the lines of close() it ran and the number of such
        returns, and the client."""
        seen = []
        returned = [0]

        def local(frame, event, arg):
            if event == "line":
                at = (frame.f_code, frame.f_lineno)
                seen.append(at)
                if at == target and seen.count(target) == 1:
                    raise KeyboardInterrupt
            return local

        def tracer(frame, event, arg):
            return local if frame.f_code in codes else None

        def profiler(frame, event, arg):
            if ((event == "c_return" and frame.f_code in codes) or
                    (event == "return" and frame.f_back is not None and
                     frame.f_back.f_code in codes and
                     frame.f_code.co_name != "__del__")):
                returned[0] += 1
                if returned[0] == returns:
                    raise KeyboardInterrupt

        c = psclient.connect(cluster.spec, request_timeout_ms=20000)
        d = c.table("dense")
        d.push_range(0, np.ones((1, 3), F32))
        # In flight while close() runs: node 1 stopped for 50 ms (a close
        # that waits waits for it), the caller's references dropped (the
        # request's handle, which would hold an out array, too).
        grads = np.zeros((100, 3), F32)
        out_alive[0] = weakref.ref(grads)
        cluster.signal(1, signal.SIGSTOP)
        out_alive[1] = d.push_range_async(0, grads).ts
        del grads
        threading.Timer(0.05, cluster.signal,
                        (1, signal.SIGCONT)).start()
        gc.collect()             # no other client's __del__ meanwhile
        sys.settrace(tracer)
        sys.setprofile(profiler)
        try:
            c.close(wait=wait)
        except KeyboardInterrupt:
            pass
        finally:
            sys.setprofile(None)
            sys.settrace(None)
            time.sleep(0.06)
            cluster.signal(1, signal.SIGCONT)
        return seen, returned[0], c

    seen, nreturns, c = lines_run()
    assert c.closed and len(calls) == 1
    targets = sorted(set(seen) & with_calls, key=lambda t: t[1])
    assert len(targets) > 10 and nreturns > 10
    for line, returns in ([(t, None) for t in targets] +
                          [(None, k) for k in range(1, nreturns + 1)]):
        calls.clear()
        _, _, c = lines_run(line, returns)
        where = (f"interrupted at line {line[1]} of "
                 f"{codes[line[0]].__name__}()" if line else
                 f"interrupted as call {returns} of {nreturns} returned")
        assert c._closer is None, where
        if c._h is not None:                 # left open: nothing closed
            assert not c.closed and not calls, where
            c.table("dense").pull_range(0, 1)
            c.close()
        assert c._h is None and calls and len(set(calls)) == len(calls), where
        n = len(calls)
        t = threading.Thread(target=c.close)
        t.start()
        t.join(5)
        assert not t.is_alive() and len(calls) == n, where


def test_close_without_waiting_from_a_handler_ends_its_threads_call(
        make_cluster):
    """close(wait=False) from a signal handler that ran while its thread
    was in a pull was put off until that call returned, then closed
    waiting: the pull went on waiting for a stopped node (20 s here).
    Now that pull ends at once with ClosedError, and the client closes
    without waiting."""
    cl = make_cluster()
    c, d = _node_1_stopped(cl, request_timeout_ms=20000)
    old = signal.signal(signal.SIGALRM,
                        lambda signum, frame: c.close(wait=False))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        t0 = time.monotonic()
        with pytest.raises(psclient.ClosedError, match="without waiting"):
            d.pull_range(0, 100)             # held by node 1
        assert time.monotonic() - t0 < 10      # before: 20 s
        assert c.closed and c._h is None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        cl.signal(1, signal.SIGCONT)


def test_two_wait_alls_let_go_only_of_the_arrays_they_waited_for(
        cluster):
    """wait_all() counted the held arrays (those of calls Ctrl-C cut off
    from their timestamp) when it began and let go of that many from the
    front when done: with a second wait_all() in another thread meanwhile,
    the first let go of arrays of a call made after it began, whose
    request the library may still send from or write into."""
    c = psclient.connect(cluster.spec)
    try:
        first, later = np.zeros(3, F32), np.zeros(3, F32)
        c._hold((first,))
        began, go = threading.Event(), threading.Event()
        real = c._wait_all

        def slow_wait_all(h):
            if threading.current_thread() is not threading.main_thread():
                began.set()
                go.wait(10)
            return real(h)

        c._wait_all = slow_wait_all
        a = threading.Thread(target=c.wait_all)
        a.start()
        assert began.wait(10)          # a counted `first` and waits
        c.wait_all()                   # lets go of `first`
        c._hold((later,))              # a call cut short after that
        go.set()
        a.join(10)
        assert not a.is_alive()
        assert [b[0] is later for b in c._held] == [True]
    finally:
        c.close()


def test_a_second_ctrl_c_during_a_close_without_waiting_still_closes(
        make_cluster, monkeypatch):
    """An exception (a second Ctrl-C) while close(wait=False) recorded the
    statuses left the client open, its in-flight arrays let go (the
    library would send them from freed memory) and requests it had marked
    failed. Past the point where it lets go of the handle, the close goes
    on, and the exception comes after."""
    cl = make_cluster()
    c, d = _node_1_stopped(cl, request_timeout_ms=20000)
    try:
        grads = np.ones((100, 3), F32)
        alive = weakref.ref(grads)
        reqs = [d.push_range_async(0, grads) for _ in range(3)]
        del grads
        real = psclient._LIB.ps_wait_timeout
        calls = []

        def interrupted(h, ts, ms):
            if ms == 0:
                calls.append(ts)
                if len(calls) == 2:
                    raise KeyboardInterrupt
            return real(h, ts, ms)

        monkeypatch.setattr(psclient._LIB, "ps_wait_timeout", interrupted)
        with pytest.raises(KeyboardInterrupt):
            c.close(wait=False)
        monkeypatch.setattr(psclient._LIB, "ps_wait_timeout", real)
        assert c.closed
        for r in reqs:
            with pytest.raises(psclient.ClosedError):
                r.wait()
        gc.collect()
        assert alive() is None           # let go once ps_close_now returned
    finally:
        cl.signal(1, signal.SIGCONT)


def test_clients_tables_and_requests_are_not_copied(cluster):
    """copy.copy(client) shared the library's client: the copy's __del__
    closed it under the original (a double free at exit). Pickling said
    "cannot pickle '_thread.RLock' object"."""
    import copy
    import pickle
    c = psclient.connect(cluster.spec)
    t = c.table("emb")
    r = t.pull_async(keys_of(1))
    for thing in (c, t, r):
        for how in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="cannot be copied or "
                               "pickled: connect in each process"):
                how(thing)
    r.wait()
    t.pull(keys_of(1))                       # the client still works
    c.close()


def test_dropped_requests_let_go_of_their_arrays_once_done(cluster):
    """A dropped request kept its arrays until its status was read (at
    1024 unread, wait_all or close): 40 dropped 64 MiB pulls held 2.5 GB.
    They go once done, at the next request issued."""
    with psclient.connect(cluster.spec) as c:
        d = c.table("dense")
        refs = []
        for _ in range(5):
            out = np.zeros((100, 3), F32)
            refs.append(weakref.ref(out))
            d.pull_range_async(0, 100, out=out)      # handle dropped
            del out
        d.pull_range(0, 100)                     # all done by now
        d.pull_range_async(0, 1)                 # issues: reads them
        gc.collect()
        assert [r() is None for r in refs] == [True] * 5
