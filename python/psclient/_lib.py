"""Loading libpsclient with ctypes, and the C declarations of client/psclient.h.

Nothing here is public: the package's ``__init__`` builds the Python API on
top of it. Every prototype below mirrors client/psclient.h; keep them in step.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, c_char, c_char_p, c_double, c_int, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)
from typing import List, Optional, Tuple

SONAME = "libpsclient.so.0"
"""The library's soname, with the major version this binding is written for."""

ENV_VAR = "PSCLIENT_LIB"
"""Names the library file to load instead of the installed one."""


class PsOptions(ctypes.Structure):
    """``struct ps_options`` of client/psclient.h, field for field.

    The ``reserved`` tail is part of the struct (the library zeroes it in
    ps_options_init and may give it meaning in a later minor version), so
    the size must match the C struct exactly; ``check_layout`` verifies it
    against the loaded library.
    """

    _fields_ = [
        ("worker", c_int),
        ("connect_timeout_ms", c_int),
        ("request_timeout_ms", c_int),
        ("max_retries", c_int),
        ("batch_delay_us", c_int),
        ("max_inflight_bytes", c_size_t),
        ("auth_token", c_char_p),
        ("sync_timeout_ms", c_int),
        ("busy_poll_us", c_int),
        ("quiet", c_int),
        ("reserved", c_char * 52),
    ]


OPTION_NAMES = ("worker", "connect_timeout_ms", "request_timeout_ms",
                "max_retries", "batch_delay_us", "max_inflight_bytes",
                "sync_timeout_ms", "busy_poll_us")
"""The ps_options fields that ``psclient.connect`` takes as keyword arguments
(besides ``auth_token``)."""


class PsTableInfo(ctypes.Structure):
    """``struct ps_table_info`` of client/psclient.h."""

    _fields_ = [("id", c_int), ("dense", c_int), ("dim", c_uint32),
                ("rows", c_uint64)]


STAT_KINDS = ("push", "pull", "pushpull", "push_range", "pull_range",
              "clock", "barrier")
"""The kinds of request ps_stats counts, in the order of PS_STAT_*."""


class PsOpStats(ctypes.Structure):
    """``struct ps_op_stats`` of client/psclient.h."""

    _fields_ = [("requests", c_uint64), ("errors", c_uint64),
                ("parts", c_uint64), ("payload_sent", c_uint64),
                ("payload_received", c_uint64), ("p50_us", c_double),
                ("p90_us", c_double), ("p99_us", c_double),
                ("max_us", c_double)]


class PsStats(ctypes.Structure):
    """``struct ps_stats_t`` of client/psclient.h."""

    _fields_ = [("op", PsOpStats * len(STAT_KINDS)),
                ("frames_sent", c_uint64), ("frames_received", c_uint64),
                ("bytes_sent", c_uint64), ("bytes_received", c_uint64),
                ("payload_sent", c_uint64), ("payload_received", c_uint64),
                ("backpressure_us", c_uint64), ("sync_wait_us", c_uint64),
                ("timeouts", c_uint64), ("resends", c_uint64),
                ("duplicates", c_uint64), ("reconnects", c_uint64),
                ("clocks_skipped", c_uint64), ("barriers_skipped", c_uint64),
                ("reserved", c_uint64 * 14)]


def stats_dict(s: PsStats) -> dict:
    """A PsStats as a plain dict: one sub-dict per kind of request (only
    the kinds that were used), then the connection-wide counters."""
    out = {}
    for i, kind in enumerate(STAT_KINDS):
        o = s.op[i]
        if o.requests or o.parts:
            out[kind] = {name: getattr(o, name) for name, _ in o._fields_}
    for name, _ in PsStats._fields_:
        if name not in ("op", "reserved"):
            out[name] = getattr(s, name)
    return out


def _candidates() -> List[str]:
    """Where to look for the library, in order.

    $PSCLIENT_LIB alone when it is set (a wrong value is an error, not a
    reason to fall back to another copy); otherwise the library that
    ``make install`` put next to this package (``_config.LIBDIR`` is
    relative to this folder, so a DESTDIR staging tree or a moved prefix
    works as well), then the dynamic linker's own search path.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return [env]
    found = []
    try:
        from . import _config  # written by `make install`
        here = os.path.dirname(os.path.abspath(__file__))
        found.append(os.path.normpath(os.path.join(here, _config.LIBDIR,
                                                   SONAME)))
    except (ImportError, OSError):
        # Not installed by make install, or unreadable (an install under a
        # strict umask): the loader's search path still may find it.
        pass
    found.append(SONAME)
    return found


def load() -> Tuple[ctypes.CDLL, str]:
    """Loads libpsclient and declares its functions.

    Returns the library and the path (or name) it was loaded from. Raises
    ImportError listing every place tried when none works. ctypes.CDLL (not
    PyDLL) is what makes every foreign call release the GIL.
    """
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            # A library without one of the functions (an older one):
            # ctypes says "undefined symbol".
            _declare(lib)
        except (OSError, AttributeError) as e:
            tried.append(f"  {path}: {e}")
            continue
        check_layout(lib)
        return lib, path
    raise ImportError(
        "psclient: cannot load libpsclient; tried:\n" + "\n".join(tried) +
        f"\nInstall psd with `make install`, or set {ENV_VAR} to the path "
        f"of {SONAME}.")


def _declare(lib: ctypes.CDLL) -> None:
    """Sets argtypes and restype of every function the binding calls.

    Buffers and the client handle travel as c_void_p (plain addresses);
    callbacks are always NULL, since a ps_done_fn would run on the
    library's I/O thread and need the GIL there.
    """
    h = c_void_p
    sig = {
        "ps_options_init": (None, [POINTER(PsOptions)]),
        "ps_open": (c_int, [POINTER(c_void_p), c_char_p, POINTER(PsOptions)]),
        "ps_close": (None, [h]),
        "ps_close_now": (None, [h]),
        "ps_strerror": (c_char_p, [c_int]),
        "ps_last_error": (c_char_p, [h]),
        "ps_table": (c_int, [h, c_char_p, POINTER(PsTableInfo)]),
        "ps_push": (c_int64, [h, c_int, c_void_p, c_size_t, c_void_p,
                              c_void_p, c_void_p]),
        "ps_pull": (c_int64, [h, c_int, c_void_p, c_size_t, c_void_p,
                              c_void_p, c_void_p]),
        "ps_pushpull": (c_int64, [h, c_int, c_void_p, c_size_t, c_void_p,
                                  c_void_p, c_void_p, c_void_p]),
        "ps_push_range": (c_int64, [h, c_int, c_uint64, c_uint64, c_void_p,
                                    c_void_p, c_void_p]),
        "ps_pull_range": (c_int64, [h, c_int, c_uint64, c_uint64, c_void_p,
                                    c_void_p, c_void_p]),
        "ps_wait": (c_int, [h, c_int64]),
        "ps_wait_all": (c_int, [h]),
        "ps_wait_timeout": (c_int, [h, c_int64, c_int]),
        "ps_wait_all_timeout": (c_int, [h, c_int]),
        "ps_clock": (c_int, [h]),
        "ps_barrier": (c_int, [h]),
        "ps_clock_timeout": (c_int, [h, c_int]),
        "ps_barrier_timeout": (c_int, [h, c_int]),
        "ps_sync_outstanding": (c_int, [h, c_int]),
        "ps_position": (c_int, [h, POINTER(c_uint64), POINTER(c_uint64)]),
        "ps_stats": (c_int, [h, POINTER(PsStats)]),
        "ps_stats_node": (c_int, [h, c_int, POINTER(PsStats)]),
        "ps_stats_reset": (None, [h]),
        "ps_stats_format": (c_int, [POINTER(PsStats), c_char_p, c_size_t]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def check_layout(lib: ctypes.CDLL) -> None:
    """Verifies that PsOptions has the size of the library's ps_options.

    ps_options_init memsets exactly sizeof(ps_options) bytes before it sets
    the defaults, so on a buffer filled with 0xAA the last byte of our
    struct (the end of ``reserved``) must come back zero and the byte after
    it untouched; ``worker`` must read -1, the documented default. Raises
    ImportError otherwise, since passing a struct of the wrong size to
    ps_open would read or write past it.
    """
    size = ctypes.sizeof(PsOptions)
    guard = 16
    buf = (ctypes.c_ubyte * (size + guard))(*([0xAA] * (size + guard)))
    lib.ps_options_init(ctypes.cast(buf, POINTER(PsOptions)))
    o = PsOptions.from_buffer(buf)
    if (buf[size - 1] != 0 or any(b != 0xAA for b in buf[size:]) or
            o.worker != -1 or any(o.reserved)):
        raise ImportError(
            f"psclient: libpsclient's struct ps_options is not the {size} "
            "bytes this binding declares (client/psclient.h changed?)")


def default_options(lib: ctypes.CDLL) -> PsOptions:
    """A PsOptions filled by the library's ps_options_init."""
    o = PsOptions()
    lib.ps_options_init(ctypes.byref(o))
    return o


def make_options(lib: ctypes.CDLL, auth_token: Optional[bytes],
                 **fields: Optional[int]) -> PsOptions:
    """ps_options_init's defaults with the given fields replaced.

    A field given as None keeps its default. ``auth_token`` is stored as a
    pointer into the bytes object, which the caller keeps alive until
    ps_open returns (ps_open copies it).
    """
    o = default_options(lib)
    for name, value in fields.items():
        if value is not None:
            setattr(o, name, value)
    o.auth_token = auth_token
    return o
