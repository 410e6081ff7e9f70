"""psclient: numpy arrays to and from psd parameter servers.

A Python binding of libpsclient, the C client library of psd (its header,
client/psclient.h, is the reference for every semantic below). It is built
on ctypes from the standard library: no compiler and no package beyond numpy
are needed, and every call into the library releases the GIL, so other
Python threads run while a pull or a clock waits for the servers.

The training loop::

    import numpy as np
    import psclient

    with psclient.connect("conf/cluster-2.ini") as c:   # or "host:port,..."
        t = c.table("fashion")                    # dense, 785 rows x 10
        w = np.empty((t.rows, t.dim), np.float32)
        g = np.empty_like(w)
        for step in range(steps):
            t.pull_range(0, t.rows, out=w)        # rows land in w, no copy
            compute_gradient(w, g)                # your model
            t.push_range(0, g)

Arrays, never copied
    Keys are numpy arrays of dtype uint64, one dimension, C-contiguous. Rows
    (``grads``, ``vals``, ``out``) are float32, C-contiguous, of shape
    ``(n, dim)`` or ``(n * dim,)``. The library reads and writes these very
    buffers: a pull returns the ``out`` array it was given (or a new
    ``(n, dim)`` array when ``out`` is None). Any other array (float64,
    a strided view, a list) raises TypeError, a wrong shape or a read-only
    ``out`` raises ValueError, before anything is sent; convert explicitly,
    e.g. with ``numpy.ascontiguousarray(a, numpy.float32)``. Large rows are
    written into ``out`` as they arrive, so a pull that fails may leave
    anything in ``out``; one that succeeds holds exactly the servers' rows.

Blocking and asynchronous calls
    ``Table.pull``, ``push``, ``pushpull``, ``pull_range`` and ``push_range``
    block until the servers have answered. Their ``*_async`` forms return a
    ``Request`` at once; ``Request.wait()`` blocks, raises the request's
    error if it failed, and returns the ``out`` array of a pull. A request
    keeps every array it was given alive until it completed, even when its
    handle is dropped, and the library reads ``keys``, ``grads`` and
    ``vals`` and writes ``out`` until then (a part sent again is read
    again), so they must not change until the request completed, and
    ``out`` holds the rows once ``wait()`` returned. The client reads the
    status of dropped requests as they complete, oldest first (each call
    that issues a request reads those done, never waiting; one still in
    flight holds back those after it), when 1024 of them are unread, at
    ``Client.wait_all()`` and at ``Client.close()``; their arrays go then.
    So an ``*_async`` call made with 1024 requests unread first waits for
    the oldest (one a bsp/ssp peer or a stopped node holds keeps it up to
    sync_timeout_ms or its bounded time; Ctrl-C ends that wait with
    nothing issued), and one made while ``max_inflight_bytes`` are in
    flight waits inside the library until enough are answered (Ctrl-C
    then takes effect as it returns). Wait for your requests or call
    ``wait_all()``.
    Clients, tables and requests cannot be copied or pickled: connect in
    each process.
    The library remembers the last 1024 failures: a request whose status
    was not read before more than 1024 requests numbered after it failed
    (a request still in flight ahead of it holds the reading back) raises
    InvalidError (its status is no longer known), never a false success.
    Requests are numbered one per call from 1 (``Request.ts``); a
    worker's clocks and barriers take numbers too, and so does the clock
    a worker's connect sends when it rejoins a bsp job past clock 0 (its
    first request is then 2). A call with no keys or no rows raises
    InvalidError: skip it for an empty minibatch.

Threads and processes
    A Client may be shared by threads. ``close()`` waits for calls running
    in other threads, then for every outstanding request. A Client does not
    survive ``fork()``: in the child it reads as closed and its calls raise
    ClosedError (the parent's client is unaffected; a fork Python does not
    see, one made in C, gets ClosedError from the library). Open one per
    process (``multiprocessing`` with the "spawn" or "forkserver" start
    method, or connect in the child). A forked child that outlives its
    parent (a DataLoader worker) keeps copies of the parent's sockets:
    the nodes notice the parent's death only after ``peer_timeout_ms``.

Errors
    A failed call raises ``psclient.Error`` (``.code``: the PS_E* code,
    ``.message``: the library's ps_last_error text), or rather the subclass
    for its code. Several also derive from the matching builtin, so that
    ``except TimeoutError`` catches a psd timeout as well:

        code          class            also a subclass of
        PS_EINVAL     InvalidError     ValueError
        PS_ENOMEM     NoMemoryError    MemoryError
        PS_ECONN      ConnectionError  builtins.ConnectionError
        PS_ETIMEDOUT  TimeoutError     builtins.TimeoutError
        PS_EPROTO     ProtocolError
        PS_EAUTH      AuthError        PermissionError
        PS_ENOTABLE   TableError       LookupError
        PS_EKEY       KeyError         builtins.KeyError
        PS_ETOOBIG    TooBigError
        PS_ECLOSED    ClosedError      (also: any call on a closed Client)
        PS_ESERVER    ServerError
        PS_ENOTOWNER  LayoutError
        PS_EBUSY      ConnectionError  builtins.ConnectionError (as PS_ECONN)
        PS_ENONFINITE NonFiniteError   ValueError (a kind of InvalidError)
        PS_EFULL      TableFullError

    ``TimeoutError``, ``ConnectionError`` and ``KeyError`` share their names
    with builtins, so ``from psclient import *`` leaves them out: write
    ``psclient.TimeoutError``.

Finding libpsclient
    ``make install`` puts this package in
    ``$(PREFIX)/lib/python3/dist-packages`` with a ``_config.py`` that
    locates the library installed with it (relative to the package, so a
    DESTDIR tree works too). The environment variable ``PSCLIENT_LIB`` (the
    path of libpsclient.so.0) overrides it; without either, the dynamic
    linker's search path is used.
    ``psclient.library_path`` tells which file was loaded.
"""

import builtins
import ctypes
import operator
import os
import sys
import threading
import warnings
import weakref
from typing import Dict, List, NoReturn, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from .export import read_export

__all__ = [
    "connect", "Client", "Table", "Request", "default_options", "strerror",
    "library_path", "Error", "InvalidError", "NoMemoryError", "ProtocolError",
    "AuthError", "TableError", "TooBigError", "ClosedError", "ServerError",
    "LayoutError", "NonFiniteError", "TableFullError",
    "PS_OK", "PS_EINVAL", "PS_ENOMEM", "PS_ECONN", "PS_ETIMEDOUT",
    "PS_EPROTO", "PS_EAUTH", "PS_ENOTABLE", "PS_EKEY", "PS_ETOOBIG",
    "PS_ECLOSED", "PS_ESERVER", "PS_ENOTOWNER", "PS_EBUSY",
    "PS_ENONFINITE", "PS_EFULL", "PS_PENDING", "read_export",
]

# The libpsclient file (or soname) this package loaded.
_LIB, library_path = _lib.load()

# Status codes, as in client/psclient.h.
PS_OK = 0
PS_EINVAL = -1
PS_ENOMEM = -2
PS_ECONN = -3
PS_ETIMEDOUT = -4
PS_EPROTO = -5
PS_EAUTH = -6
PS_ENOTABLE = -7
PS_EKEY = -8
PS_ETOOBIG = -9
PS_ECLOSED = -10
PS_ESERVER = -11
PS_ENOTOWNER = -12
PS_EBUSY = -13
PS_ENONFINITE = -14
PS_EFULL = -15
PS_PENDING = 1       # not an error: ps_wait_timeout's "still in flight"

# A blocked wait returns to Python this often (milliseconds), so that a
# signal handler runs while the library waits: Ctrl-C interrupts a pull
# held by a stopped node or a slow bsp peer, instead of only once the
# request's time (30 s by default) is up. A completion ends a slice at
# once: the slices cost nothing while requests complete.
_WAIT_SLICE_MS = 100

_CODE_NAMES = {v: k for k, v in globals().items()
               if k.startswith("PS_E") and isinstance(v, int)}

# How many requests whose status nobody read a client keeps before it reads
# the oldest ones itself (see Client._submit).
_MAX_UNREAD = 1024

# How many times this process is a child of fork() (counted in the child):
# a Client opened before the fork has no I/O thread in the child, and its
# lock may have been held by a thread of the parent (see Client._forked).
_forks = 0


def _count_fork() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_count_fork)

_FORKED = ("this client was opened before fork(): its I/O thread stayed "
           "in the parent; connect again in this process")

_ABANDONED = ("the client is closing without waiting for requests "
              "(close(wait=False), or Ctrl-C)")

def strerror(code: int) -> str:
    """The library's text for a status code (ps_strerror)."""
    # Past a C int, ctypes would cut it (2**40 read as 0, "success").
    if not -2**31 <= code < 2**31:
        code = -2**31
    return _LIB.ps_strerror(code).decode("utf-8", "replace")


# ---- errors -----------------------------------------------------------------

class Error(Exception):
    """A failed libpsclient call.

    ``code`` is the negative PS_E* status, ``message`` the detail the library
    gave (ps_last_error), possibly empty. The subclass tells the code.
    """

    code: int
    message: str

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        name = _CODE_NAMES.get(self.code, f"status {self.code}")
        head = f"{name} ({strerror(self.code)})"
        return f"{head}: {self.message}" if self.message else head

    def __repr__(self) -> str:
        return f"psclient.{type(self).__name__}({self.code}, {self.message!r})"

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class InvalidError(Error, ValueError):
    """PS_EINVAL: a bad argument, or a call this client may not make (for
    example ``clock()`` from a client that is not a worker)."""


class NoMemoryError(Error, MemoryError):
    """PS_ENOMEM: memory ran out, in this process's library or on a
    node (creating rows, answering a pull: the message says which and
    how much was applied). A MemoryError too: check ``str(e)`` to tell
    the server's from this process's own."""


class ConnectionError(Error, builtins.ConnectionError):
    """PS_ECONN: could not connect, or the connection was lost; also
    PS_EBUSY: the server is at a limit, try again later. (A request whose
    node cannot be reached, refused, lost or silent, raises TimeoutError
    once its bounded time is up: catch both.)"""


class TimeoutError(Error, builtins.TimeoutError):
    """PS_ETIMEDOUT: no answer within request_timeout_ms x (max_retries + 1),
    whatever the node did (refused connections, a lost connection,
    silence: the text says which), or a clock, barrier or held pull waited
    longer than sync_timeout_ms."""


class ProtocolError(Error):
    """PS_EPROTO: the peer broke the protocol."""


class AuthError(Error, PermissionError):
    """PS_EAUTH: authentication failed."""


class TableError(Error, LookupError):
    """PS_ENOTABLE: no such table."""


class KeyError(Error, builtins.KeyError):
    """PS_EKEY: a key or row out of the table's range."""


class TooBigError(Error):
    """PS_ETOOBIG: a request piece exceeds the server's max_frame."""


class ClosedError(Error):
    """PS_ECLOSED: the client is closing or closed."""


class ServerError(Error):
    """PS_ESERVER: the server failed to carry out the request."""


class LayoutError(Error):
    """PS_ENOTOWNER: a server does not own the shard (layout mismatch)."""


class NonFiniteError(InvalidError):
    """PS_ENONFINITE: a pushed value is NaN or infinite and the table
    refuses those (nonfinite = reject). The push is refused whole, on
    every node and at any size: its parts without such a value are sent
    only once those with one were applied. Only while a SIGHUP has set
    nonfinite differently on some nodes can a node that allows such values
    apply its part; ``message`` then says "applied in part"."""


class TableFullError(Error):
    """PS_EFULL: a sparse table holds max_rows rows on a node (or one of its
    shards as many as a shard can hold); that node refuses its part of a
    push that would add rows there (pulls still work), and
    the parts on other nodes may have been applied (``message`` says so)."""


_ERRORS = {
    PS_EINVAL: InvalidError, PS_ENOMEM: NoMemoryError,
    PS_ECONN: ConnectionError, PS_ETIMEDOUT: TimeoutError,
    PS_EPROTO: ProtocolError, PS_EAUTH: AuthError, PS_ENOTABLE: TableError,
    PS_EKEY: KeyError, PS_ETOOBIG: TooBigError, PS_ECLOSED: ClosedError,
    PS_ESERVER: ServerError, PS_ENOTOWNER: LayoutError,
    PS_EBUSY: ConnectionError, PS_ENONFINITE: NonFiniteError,
    PS_EFULL: TableFullError,
}


def _error(code: int, message: str) -> Error:
    return _ERRORS.get(code, Error)(code, message)


# ---- argument checks --------------------------------------------------------
# They run before any call into the library, so a bad argument never sends
# anything or takes a request number.

def _describe(a: object) -> str:
    if isinstance(a, np.ndarray):
        return f"an array of dtype {a.dtype} and shape {a.shape}"
    return f"a {type(a).__module__}.{type(a).__qualname__}".replace(
        "a builtins.", "a ")


def _check_array(name: str, a: object, dtype: type) -> np.ndarray:
    """Checks that a is a C-contiguous, aligned numpy array of dtype, not
    a masked array (its mask would be ignored)."""
    want = np.dtype(dtype)
    if isinstance(a, np.ma.MaskedArray):
        # Its data would be sent, or written, whatever its mask says.
        raise TypeError(f"{name}: a masked array's mask would be ignored "
                        f"(pass a.filled(value), or a.data for all of it)")
    if not isinstance(a, np.ndarray) or a.dtype != want:
        raise TypeError(f"{name}: expected a numpy array of dtype {want}, "
                        f"got {_describe(a)} (psclient never converts or "
                        f"copies arrays)")
    if not a.flags.c_contiguous or not a.flags.aligned:
        raise TypeError(f"{name}: expected a C-contiguous, aligned {want} "
                        f"array, got a strided or unaligned view of shape "
                        f"{a.shape} (numpy.ascontiguousarray copies it)")
    return a


def _check_keys(keys: object) -> int:
    """Returns the number of keys."""
    k = _check_array("keys", keys, np.uint64)
    if k.ndim != 1:
        raise ValueError(f"keys: expected one dimension, got shape {k.shape}")
    return k.shape[0]


def _check_rows(name: str, a: object, n: int, dim: int,
                writable: bool = False) -> np.ndarray:
    """Checks a float32 array of n rows of dim: shape (n, dim) or (n*dim,)."""
    a = _check_array(name, a, np.float32)
    if a.shape != (n, dim) and a.shape != (n * dim,):
        raise ValueError(f"{name}: expected shape ({n}, {dim}) or "
                         f"({n * dim},), got {a.shape}")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    return a


def _out_rows(out: Optional[np.ndarray], n: int, dim: int) -> np.ndarray:
    if out is None:
        return np.empty((n, dim), np.float32)
    return _check_rows("out", out, n, dim, writable=True)


def _count_rows(name: str, a: object, dim: int) -> int:
    """Rows in a float32 array of shape (count, dim) or (count*dim,)."""
    a = _check_array(name, a, np.float32)
    if a.ndim == 2 and a.shape[1] == dim:
        return a.shape[0]
    if a.ndim == 1 and a.shape[0] % dim == 0:
        return a.shape[0] // dim
    raise ValueError(f"{name}: expected shape (count, {dim}) or "
                     f"(count * {dim},), got {a.shape}")


def _uint64(name: str, v: object) -> int:
    if isinstance(v, (bool, np.bool_)):
        # operator.index takes True as 1 (row 1), as connect() refuses.
        raise TypeError(f"{name}: expected an int, got a bool")
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {_describe(v)}") \
            from None
    if not 0 <= i < 1 << 64:
        raise ValueError(f"{name}: {i} is not in 0..2**64-1")
    return i


def _node(v: object) -> int:
    """A node number for ps_stats_node, whose argument is a C int: ctypes
    would cut a bigger one to its low 32 bits (2**32 reading node 0)."""
    if isinstance(v, (bool, np.bool_)):
        # operator.index takes True as 1: stats(True) read node 1.
        raise TypeError("node: expected an int, got a bool")
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"node: expected an int, got {_describe(v)}") \
            from None
    if not 0 <= i <= _INT_MAX:
        raise InvalidError(PS_EINVAL, f"no node {i} in the cluster")
    return i


def _cstr(name: str, s: Union[str, bytes]) -> bytes:
    """s as the bytes of a C string. C stops at the first NUL, so a string
    holding one would reach the library cut short, silently naming another
    table, server or token."""
    if isinstance(s, str):
        b = s.encode()
    elif isinstance(s, (bytes, bytearray)):
        b = bytes(s)
    else:
        # bytes() of an int would make that many NULs.
        raise TypeError(f"{name}: expected a str, got {_describe(s)}")
    if b"\0" in b:
        raise ValueError(f"{name}: {s!r} holds a NUL character")
    return b


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# ---- requests ---------------------------------------------------------------


def _not_copied(self: object, protocol: object) -> NoReturn:
    """__reduce_ex__ of Client, Table and Request: copy, deepcopy and
    pickle raise. A copy would share the library's client, and the copy's
    close (its __del__) freed it under the original."""
    raise TypeError(f"a psclient {type(self).__name__} cannot be copied or "
                    f"pickled: connect in each process (with "
                    f"multiprocessing, in the worker)")


class Request:
    """An asynchronous request in flight, returned by the ``*_async`` calls.

    ``ts`` is its timestamp; ``wait()`` blocks until it completed. The
    request holds a reference to every array it was given until then, so
    they cannot be freed in flight.
    """

    __slots__ = ("_ts", "_client", "_bufs", "_out", "_status", "_message",
                 "__weakref__")

    def __init__(self, client: "Client", ts: int, bufs: Tuple[np.ndarray, ...],
                 out: Optional[np.ndarray]) -> None:
        self._ts = ts
        # Weak: the client's _pending holds the request, and a strong
        # reference back made a cycle that kept a dropped client (and its
        # worker id, its connections) open until the garbage collector
        # ran. A client dropped meanwhile closed, reading this status.
        self._client = weakref.ref(client)
        self._bufs: Optional[Tuple[np.ndarray, ...]] = bufs
        self._out = out
        self._status: Optional[int] = None
        self._message = ""

    @property
    def ts(self) -> int:
        """The request's timestamp: the client numbers its requests from 1,
        one per call."""
        return self._ts

    def wait(self) -> Optional[np.ndarray]:
        """Blocks until the request completed (GIL released; a signal
        handler runs meanwhile, and Ctrl-C interrupts the wait, leaving the
        request in flight).

        Returns the ``out`` array of a pull or pushpull, None for a push.
        Raises the request's Error if it failed; waiting again gives the
        same result. InvalidError when its status is no longer known: more
        than 1024 requests failed after it before its status was read.
        """
        client = self._client()
        if self._status is None and client is not None:
            client._settle(self)
        if self._status is None:
            # A close cut short after it let go of the handle (Ctrl-C
            # twice) may not have read it: unknown is not success.
            raise ClosedError(PS_ECLOSED, "the client closed before this "
                              "request's status was read")
        if self._status:
            raise _error(self._status, self._message)
        return self._out

    @property
    def done(self) -> bool:
        """Whether the request completed: a poll that never waits (C's
        ps_wait_timeout(c, ts, 0), MPI_Test), which reads its status when
        it has, so that wait() then returns or raises at once. Once the
        client is closing or closed, whether its status was read."""
        if self._status is None:
            client = self._client()
            if client is not None:
                client._poll(self)
        return self._status is not None

    __reduce_ex__ = _not_copied

    def __repr__(self) -> str:
        state = ("pending" if self._status is None else
                 "ok" if self._status == 0 else
                 _CODE_NAMES.get(self._status, str(self._status)))
        return f"<psclient.Request ts={self.ts} {state}>"


# ---- tables -----------------------------------------------------------------

class Table:
    """A table of the cluster, from ``Client.table(name)``.

    Attributes (read-only: the library sizes what it writes by the
    table's own, and a ``dim`` set smaller overran ``out``): ``id``,
    ``name``, ``dim`` (floats per row), ``rows`` (dense tables: the row
    count; sparse: 0) and ``dense``. Keys are uint64 row numbers (dense) or
    any uint64 (sparse); see the package docstring for the arrays. Every
    blocking call releases the GIL while it waits.
    """

    __slots__ = ("_client", "_id", "_name", "_dim", "_rows", "_dense",
                 "__weakref__")

    def __init__(self, client: "Client", name: str,
                 info: _lib.PsTableInfo) -> None:
        self._client = client
        self._id = int(info.id)
        self._name = name
        self._dim = int(info.dim)
        self._rows = int(info.rows)
        self._dense = bool(info.dense)

    @property
    def id(self) -> int:
        """The table's number in the cluster."""
        return self._id

    @property
    def name(self) -> str:
        """The table's name, as in ``[table.NAME]``."""
        return self._name

    @property
    def dim(self) -> int:
        """Floats per row."""
        return self._dim

    @property
    def rows(self) -> int:
        """A dense table's row count; 0 for a sparse one."""
        return self._rows

    @property
    def dense(self) -> bool:
        """Whether the table is dense (rows 0..rows-1)."""
        return self._dense

    __reduce_ex__ = _not_copied

    def __repr__(self) -> str:
        kind = f"dense, {self.rows} rows" if self.dense else "sparse"
        return (f"<psclient.Table {self.name!r} id={self.id} {kind}, "
                f"dim {self.dim}>")

    # Each public call checks its arrays, then hands (function, arguments,
    # arrays to keep alive, out) to the client.

    def _check_range(self, first: int, count: int) -> None:
        """Raises the error the library gives a range outside the table
        (client/slice.c, psc_req_range; its text from proto/status.c,
        psw_range_error), for a pull_range that would otherwise allocate
        count rows first: a count far past the table raised numpy's
        MemoryError."""
        if not self.dense:
            raise InvalidError(PS_EINVAL, f"table '{self.name}' is sparse: "
                               f"range requests need a dense table")
        if count == 0:
            raise InvalidError(PS_EINVAL, f"an empty range (count 0) at row "
                               f"{first} of table '{self.name}' (rows = "
                               f"{self.rows})")
        if first >= self.rows or count > self.rows - first:
            if first + count - 1 >= 1 << 64:
                raise KeyError(PS_EKEY, f"{count} rows from row {first} "
                               f"(past row 2^64 - 1) are outside table "
                               f"'{self.name}' (rows = {self.rows})")
            if first < self.rows:
                raise KeyError(PS_EKEY, f"rows {first}..{first + count - 1} "
                               f"go past the end of table '{self.name}' "
                               f"(rows = {self.rows}: its last row is "
                               f"{self.rows - 1})")
            raise KeyError(PS_EKEY, f"rows {first}..{first + count - 1} are "
                           f"outside table '{self.name}' (rows = {self.rows})")

    def _pull(self, keys: np.ndarray, out: Optional[np.ndarray]):
        n = _check_keys(keys)
        out = _out_rows(out, n, self.dim)
        return (_LIB.ps_pull, (self.id, _addr(keys), n, _addr(out), None,
                               None), (keys, out), out)

    def _push(self, keys: np.ndarray, grads: np.ndarray):
        n = _check_keys(keys)
        _check_rows("grads", grads, n, self.dim)
        return (_LIB.ps_push, (self.id, _addr(keys), n, _addr(grads), None,
                               None), (keys, grads), None)

    def _pushpull(self, keys: np.ndarray, grads: np.ndarray,
                  out: Optional[np.ndarray]):
        n = _check_keys(keys)
        _check_rows("grads", grads, n, self.dim)
        out = _out_rows(out, n, self.dim)
        return (_LIB.ps_pushpull, (self.id, _addr(keys), n, _addr(grads),
                                   _addr(out), None, None),
                (keys, grads, out), out)

    def _pull_range(self, first: int, count: int, out: Optional[np.ndarray]):
        first = _uint64("first", first)
        count = _uint64("count", count)
        # Before allocating count rows, and before out's shape is checked
        # against count: a range past the table is a KeyError with or
        # without out (with out it was a ValueError of 2^64 rows).
        self._check_range(first, count)
        out = _out_rows(out, count, self.dim)
        return (_LIB.ps_pull_range, (self.id, first, count, _addr(out), None,
                                     None), (out,), out)

    def _push_range(self, first: int, vals: np.ndarray):
        first = _uint64("first", first)
        count = _count_rows("vals", vals, self.dim)
        return (_LIB.ps_push_range, (self.id, first, count, _addr(vals), None,
                                     None), (vals,), None)

    def pull(self, keys: np.ndarray, out: Optional[np.ndarray] = None
             ) -> np.ndarray:
        """Pulls the rows of ``keys`` into ``out`` and returns ``out``.

        ``out``: float32 of shape (n, dim) or (n*dim,); None allocates an
        (n, dim) array. A sparse key never pushed reads its seeded initial
        row.
        """
        return self._client._call(*self._pull(keys, out))

    def push(self, keys: np.ndarray, grads: np.ndarray) -> None:
        """Pushes ``grads`` (float32, (n, dim) or (n*dim,)) to the rows of
        ``keys``; the table's updater applies them on the servers, each
        occurrence of a repeated key in turn (two optimizer steps for
        adagrad, adam and ftrl, not one with the sum). On a bsp table a
        clock's pushes are summed per key first, duplicates included."""
        self._client._call(*self._push(keys, grads))

    def pushpull(self, keys: np.ndarray, grads: np.ndarray,
                 out: Optional[np.ndarray] = None) -> np.ndarray:
        """Pushes ``grads``, then pulls the rows as they are after that push,
        in one round trip. Returns ``out`` (allocated when None)."""
        return self._client._call(*self._pushpull(keys, grads, out))

    def pull_range(self, first: int, count: int,
                   out: Optional[np.ndarray] = None) -> np.ndarray:
        """Dense tables: pulls rows first..first+count-1 into ``out`` (float32,
        (count, dim) or (count*dim,); None allocates) and returns it."""
        return self._client._call(*self._pull_range(first, count, out))

    def push_range(self, first: int, vals: np.ndarray) -> None:
        """Dense tables: pushes ``vals`` (float32, (count, dim) or
        (count*dim,)) to rows first..first+count-1."""
        self._client._call(*self._push_range(first, vals))

    def pull_async(self, keys: np.ndarray, out: Optional[np.ndarray] = None
                   ) -> Request:
        """``pull`` without waiting; ``Request.wait()`` returns ``out``.
        ``keys`` must not change, and ``out`` is written, until the
        request completed."""
        return self._client._submit(*self._pull(keys, out))

    def push_async(self, keys: np.ndarray, grads: np.ndarray) -> Request:
        """``push`` without waiting. ``keys`` and ``grads`` must not change
        until the request completed."""
        return self._client._submit(*self._push(keys, grads))

    def pushpull_async(self, keys: np.ndarray, grads: np.ndarray,
                       out: Optional[np.ndarray] = None) -> Request:
        """``pushpull`` without waiting; ``Request.wait()`` returns ``out``.
        ``keys`` and ``grads`` must not change, and ``out`` is written,
        until the request completed."""
        return self._client._submit(*self._pushpull(keys, grads, out))

    def pull_range_async(self, first: int, count: int,
                         out: Optional[np.ndarray] = None) -> Request:
        """``pull_range`` without waiting; ``Request.wait()`` returns
        ``out``, which is written until the request completed."""
        return self._client._submit(*self._pull_range(first, count, out))

    def push_range_async(self, first: int, vals: np.ndarray) -> Request:
        """``push_range`` without waiting. ``vals`` must not change until the
        request completed."""
        return self._client._submit(*self._push_range(first, vals))


# ---- the client -------------------------------------------------------------

def default_options() -> Dict[str, int]:
    """The library's defaults (ps_options_init) for connect()'s options."""
    o = _lib.default_options(_LIB)
    return {name: getattr(o, name) for name in _lib.OPTION_NAMES}


_INT_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_int) - 1)) - 1
_SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1


class Client:
    """A connection to a psd cluster; made by ``psclient.connect``.

    Use it as a context manager, or call ``close()``. Its methods may be
    called from several threads; each blocking one releases the GIL.
    """

    def __init__(self, servers_or_ini: Union[str, os.PathLike],
                 worker: int = -1, auth_token: Union[str, bytes, None] = None,
                 **options: Optional[int]) -> None:
        """Same arguments as ``psclient.connect``."""
        self.servers = os.fspath(servers_or_ini)
        self._h: Optional[int] = None
        # The lock is taken with `with self._lock:`, not through the
        # Condition: a Condition's __enter__ and __exit__ are Python
        # functions, where a signal handler may raise (Ctrl-C) with the
        # lock taken and never let go; the RLock's are C.
        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)
        self._busy = 0             # calls into the library now running
        self._busy_in: Dict[int, int] = {}   # thread id -> its running calls
        self._closing = False
        # The thread inside close(), and the one whose close() waits for
        # its own call to return (both: see close()).
        self._closer: Optional[int] = None
        self._close_later: Optional[int] = None
        self._close_later_nowait = False     # that close without waiting
        self._pending: Dict[int, Request] = {}   # ts -> status still unread
        # Arrays of requests an exception cut off from their timestamp
        # (see _hold): kept until ps_wait_all has returned.
        self._held: List[Tuple[np.ndarray, ...]] = []
        self._held_gone = 0        # entries let go of from _held's front
        # The thread whose wait Ctrl-C (KeyboardInterrupt) cut short
        # (threading.get_ident()), or False: __del__ then closes without
        # waiting (close(False)).
        self._interrupted = False
        # Whether a thread is in clock() [0] or barrier() [1]: its wait
        # runs in slices, each a library call of its own, so the library's
        # refusal of a second thread (PS_EINVAL) would let one in between
        # slices, to join the clock under way and count none of its own.
        self._in_sync = [False, False]
        # Set by a close that does not wait: waits in other threads end
        # (ClosedError) instead of holding that close for their requests.
        self._abandon = False
        # Weak: each Table holds its client, and a dict of strong ones
        # made a cycle that kept a dropped client open until the garbage
        # collector ran (a worker id stayed taken: PS_EBUSY on reconnect).
        self._tables: "weakref.WeakValueDictionary[str, Table]" = \
            weakref.WeakValueDictionary()
        self._forks = _forks

        fields: Dict[str, Optional[int]] = {"worker": worker}
        for name, value in options.items():
            if name not in _lib.OPTION_NAMES or name == "worker":
                raise TypeError(f"connect() got an unexpected keyword "
                                f"argument {name!r}")
            fields[name] = value
        for name, value in fields.items():
            if value is None:
                continue
            if isinstance(value, (bool, np.bool_)):
                # operator.index takes True as 1: worker=True would join
                # as worker 1.
                raise TypeError(f"{name}: expected an int, got a bool")
            try:
                value = operator.index(value)
            except TypeError:
                raise TypeError(f"{name}: expected an int, got "
                                f"{_describe(value)}") from None
            top = (_SIZE_MAX if name == "max_inflight_bytes" else _INT_MAX)
            low = 0 if name == "max_inflight_bytes" else -_INT_MAX - 1
            if not low <= value <= top:
                raise ValueError(f"{name}: {value} is out of range")
            fields[name] = value
        servers = _cstr("servers_or_ini", self.servers)
        if auth_token is not None:
            auth_token = _cstr("auth_token", auth_token)
        opts = _lib.make_options(_LIB, auth_token, **fields)
        # The reason is raised with the exception below: the library need
        # not print it on stderr as well.
        opts.quiet = 1
        self.worker: int = opts.worker
        # clocks_skipped + barriers_skipped as last said (the library's own
        # line on stderr is off with quiet): a warning at the clock() or
        # barrier() after it.
        self._skipped_said = 0
        self._stats_buf = _lib.PsStats()

        # ps_open runs in a thread of its own while this one waits for it
        # a little at a time: a signal handler (Ctrl-C) runs only between
        # Python's steps, and ps_open may wait connect_timeout_ms (and a
        # worker's first clock, sync_timeout_ms) on nodes that do not
        # answer. Interrupted, the wait ends at once; a connection the
        # thread makes after that is closed by the thread.
        lock = threading.Lock()
        got: dict = {}

        def opener() -> None:
            try:
                h = ctypes.c_void_p()
                rc = _LIB.ps_open(ctypes.byref(h), servers,
                                  ctypes.byref(opts))
                # ps_last_error(NULL): why this thread's ps_open failed
                # (not on stderr: opts.quiet).
                why = ("" if rc == PS_OK else
                       _LIB.ps_last_error(None).decode("utf-8", "replace"))
            except BaseException as e:   # handed to the caller
                got["exc"] = e
                return
            with lock:
                if got.get("abandoned"):
                    if h.value:
                        _LIB.ps_close(h.value)
                    return
                got.update(rc=rc, h=h.value, why=why)

        t = threading.Thread(target=opener, name="psclient-connect",
                             daemon=True)
        try:
            t.start()
            while t.is_alive():
                t.join(0.05)
            if "exc" in got:
                raise got["exc"]
            rc = got.get("rc", PS_ECLOSED)
            if rc != PS_OK:
                # An ini names a cluster, not a host: say which it is
                # (as text: bytes are taken too, as os.fspath takes them).
                name = os.fsdecode(self.servers)
                what = (f"the cluster of {name}"
                        if os.path.isfile(self.servers) else name)
                why = got.get('why', 'it did not finish')
                # The library's reason names the node it could not reach:
                # the address list again would say it twice.
                raise _error(rc, why if name in why else
                             f"cannot connect to {what}: {why}")
            self._h = got["h"]
        except BaseException:
            # Interrupted (Ctrl-C) before the handle was kept: nothing else
            # could ever close it. Said first, in one step (a second Ctrl-C
            # may come at any point below): from here on the thread closes
            # what it opens; one it kept already is closed here, the lock
            # taken again if a Ctrl-C cuts the taking short.
            got["abandoned"] = True
            while True:
                try:
                    with lock:
                        h = got.pop("h", None) if self._h is None else None
                    break
                except KeyboardInterrupt:
                    continue
            if h:
                _LIB.ps_close(h)
            raise

    # -- lifetime --

    def close(self, wait: bool = True) -> None:
        """Waits for calls running in other threads and for every
        outstanding request (reading their statuses, so ``Request.wait()``
        still answers afterwards), leaves the training if this client is a
        worker (first telling every node that it pushed to a bsp table in
        a step it has not clocked, so that ``aggregate = mean`` counts it
        everywhere), says goodbye to the nodes a reader pushed to (so
        they forget its pushes at once; 1 s at most), and disconnects.
        Closing twice is a no-op.

        With ``wait=False``, or when Ctrl-C (KeyboardInterrupt) cuts the
        wait for requests short, outstanding requests are not waited for:
        each fails with ClosedError (a push sent but not answered may have
        been applied), a worker still leaves (waiting at most
        request_timeout_ms for the nodes; without telling the nodes its
        pushes of an unclocked step did not reach that it pushed, so with
        ``aggregate = mean`` only those count it in that step, as after a
        crash), and the KeyboardInterrupt is raised again once closed
        (ps_close_now). A request held by a
        stopped node or a slow bsp/ssp peer would keep a waiting close
        for up to sync_timeout_ms, and so would a clock() or barrier()
        that Ctrl-C cut short: it is still under way. Calls of other
        threads that wait for a request, a clock() or a barrier() end
        too, with ClosedError, within 0.1 s; one blocked inside the
        library while ``max_inflight_bytes`` are in flight is waited for
        (until enough are answered or failed). Leaving a
        ``with`` block by Ctrl-C closes so, as does ``__del__`` after
        Ctrl-C cut a wait short (a wait that then ends in the thread it
        interrupted, which caught it, puts that aside). Otherwise ``__del__``
        (a client dropped, or still open when the interpreter exits)
        waits as close() does, so that pushes issued are not lost: with a
        node that does not answer, up to request_timeout_ms x
        (max_retries + 1) per request it holds (30 s by default); Ctrl-C
        cuts it short. Requests whose status was not read that failed
        then are said in a RuntimeWarning (their statuses are no one's to
        read at the interpreter's end; close() says nothing, as
        ``Request.wait()`` still answers after it). An exception before
        the close lets go of the client (Ctrl-C while it waits for other
        threads' calls) leaves it open; one after, the close goes on and
        it is raised once closed.

        While a close() waits for requests, other threads' new calls fail
        at once with ClosedError (a ``Request.wait()`` waits for the close,
        then answers), and a close() from another thread returns once this
        one has (or, if this one was cut short leaving the client open,
        closes it itself); with ``wait=False`` it first ends this one's
        waits, as if this one had not waited.

        Called from a signal handler (or another object's ``__del__``) that
        runs while its thread is in a call on this client, close() returns
        at once and the client is closed as that call returns (``closed``
        is True from then); with ``wait=False`` it also ends that call's
        (and other threads') waits with ClosedError, and that close does
        not wait. Called again while its thread is in close(), it returns
        at once and the close goes on."""
        if self._forked():
            # The library's client is the parent's to close: calling it
            # here would wait for, then stop, a thread that is not in this
            # process. Its memory in the child is left as it is.
            self._h = None
            return
        me = threading.get_ident()
        late: Optional[BaseException] = None   # raised once closed
        cut = not wait           # the requests are not all waited for
        owner = False            # this call is the one closing
        h: Optional[int] = None
        # Whatever is raised (Ctrl-C at any point), the finally below
        # leaves the client either open, when the handle was not let go
        # (nothing was closed), or closed, the library's client closed
        # exactly once: never claimed by a close that has returned.
        try:
            try:
                with self._lock:
                    while True:
                        if self._h is None or self._closer == me:
                            return
                        if self._busy_in.get(me):
                            # A signal handler, in the middle of this
                            # thread's own call on the client: waiting for
                            # that call (or for a close that waits for it)
                            # would wait for ever. The client is closed as
                            # that call returns (see _release); without
                            # waiting, that call's own wait ends now.
                            self._closing = True
                            self._close_later = me
                            if not wait:
                                self._close_later_nowait = True
                                self._abandon = True
                            return
                        if self._closer is None:
                            break
                        # Another thread is closing: this close returns
                        # once that one has; without waiting, it first
                        # ends that one's waits for requests (ClosedError
                        # in _sliced), as it would its own.
                        if not wait:
                            self._abandon = True
                        self._cv.wait()
                    owner = True
                    self._closing = True
                    self._closer = me
                    if not wait:
                        # Waits in other threads end within a slice
                        # instead of holding this close for their requests.
                        self._abandon = True
                    while self._busy:
                        self._cv.wait()
                    # Nothing else runs on the handle from here on: new
                    # calls see _closing and fail, status reads wait for
                    # the close to end.
                    h = self._h
                # The waits for requests run without the lock, so that
                # other threads' calls fail at once (ClosedError) instead
                # of queueing behind them, and a close(wait=False) from
                # another thread can end them (each wait slice looks at
                # _abandon). Ctrl-C there closes without waiting; another
                # exception a signal handler raises leaves the client open.
                if h is not None and wait:
                    try:
                        self._wait_all(h)
                        for req in list(self._pending.values()):
                            self._read_status(h, req)
                    except ClosedError:  # another close(wait=False)
                        cut = True
                    except KeyboardInterrupt as e:
                        late, cut = e, True
                with self._lock:
                    # Before the library's close: a signal handler that
                    # raises runs as it returns, and a handle still set
                    # then would reach the library again at the next
                    # close() or __del__.
                    self._h = None
            except BaseException as e:
                if not (owner and self._h is None):
                    raise
                # Just after the handle was let go: the close goes on,
                # without waiting, and the exception comes after.
                late, cut = e, True
        finally:
            if owner and self._h is not None:
                if self._closer == me:
                    # Raised before anything was closed: the client stays
                    # open (or status reads would wait for a close that
                    # never comes).
                    with self._lock:
                        self._closing = False
                        self._abandon = False
                        self._closer = None
                        self._cv.notify_all()
            elif owner:
                # A signal handler may raise as _end_close begins, before
                # its first line: then it is called again.
                began: List[bool] = []
                while True:
                    try:
                        self._end_close(h, cut, late, began)
                        break
                    except BaseException as e:
                        if began:
                            raise
                        late, cut = e, True
                late = None
        if late is not None:
            try:                     # as wait_all: no frame cycle
                raise late
            finally:
                del late

    def _end_close(self, h: Optional[int], cut: bool,
                   late: Optional[BaseException], began: List[bool]) -> None:
        """The rest of close() once it let go of the handle h (None: there
        was none to close): statuses, the library's close, then other
        closes and status reads may go on. Raises late, or what cut it
        short, after the library's close. Says it began in began, inside
        the try whose finally closes the library's client: an interrupt as
        the append returns is raised there, not before it."""
        # The arrays stay referenced (keep) until the library's close has
        # returned: it may send them, or write pulled rows into them, until
        # then. Status reads in other threads wait until _closer is None,
        # after the statuses are set.
        keep = None
        try:
            began.append(True)
            with self._lock:
                pending = list(self._pending.values())
                keep = (list(self._held), [r._bufs for r in pending])
                self._pending.clear()
                self._held_gone += len(self._held)
                self._held.clear()
                try:
                    if cut and h is not None:
                        self._give_up(h, pending)
                except BaseException as e:   # a second Ctrl-C
                    late, cut = e, True
                for req in pending:
                    if req._status is None:  # _give_up cut short
                        req._status = PS_ECLOSED
                        req._message = _ABANDONED
                    req._bufs = None
        finally:
            # Nothing to do if it did not begin (an interrupt as it
            # was called): close() calls it again.
            if began:
                # Outside the lock: a worker's goodbye waits for the nodes (up
                # to request_timeout_ms with one stopped), and other threads'
                # calls meanwhile fail at once instead of queueing behind it.
                # A close from another thread returns once this one has.
                # Called exactly once, even when Ctrl-C comes just before
                # the call (tried again) or as it returns (done: raised after).
                # Between `called = True` and the call no handler can run:
                # the library's functions are C, with nothing in Python
                # before them ("no handler here" below).
                called = h is None
                while True:
                    try:
                        if not called:
                            called = True
                            if not cut:
                                _LIB.ps_close(h)          # no handler here
                            else:
                                _LIB.ps_close_now(h)      # no handler here
                        break
                    except BaseException as e:
                        late = e
                        if called:
                            break
                del keep
                told = False         # the others waiting were told (again)
                while not told:
                    try:
                        with self._lock:
                            self._closer = None
                            self._cv.notify_all()
                            told = True
                    except BaseException as e:
                        late = e
        if late is not None:
            try:                     # as wait_all: no frame cycle
                raise late
            finally:
                del late

    @staticmethod
    def _give_up(h: int, pending: List[Request]) -> None:
        """close() without waiting: records each unread request's status,
        as ClosedError for those still in flight (ps_close_now fails them
        so). Their arrays are the caller's to keep until ps_close_now has
        returned."""
        why = ("the client closed without waiting for it (close(wait="
               "False), or Ctrl-C while close() waited): a push sent may "
               "have been applied")
        for req in pending:
            st = _LIB.ps_wait_timeout(h, req.ts, 0)
            if st == PS_PENDING:
                st, msg = PS_ECLOSED, why
            else:
                msg = (_LIB.ps_last_error(h).decode("utf-8", "replace")
                       if st else "")
            if req._status is None:
                req._status, req._message = st, msg
            req._bufs = None

    @property
    def closed(self) -> bool:
        """Whether close() was called (or the client was opened before
        the fork() that made this process)."""
        return self._forked() or self._h is None or self._closing

    def _forked(self) -> bool:
        """Whether this process is a child of a fork() made after the
        client was opened. Checked before taking self._cv, which another
        thread of the parent may have held at the fork."""
        return self._forks != _forks

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # Ctrl-C: the user wants out, not to wait for requests a stopped
        # node or a slow peer holds.
        self.close(wait=exc_type is not KeyboardInterrupt)

    def __del__(self) -> None:
        # The requests whose statuses the trainer never read: at a
        # script's end, the usual case, no one will (a Request kept alive
        # still answers), so failures among them are said below. A trial's
        # 50 pushes to a stopped node failed at exit with not a word, after
        # a 5 s wait. After Ctrl-C they fail unread by the user's choice:
        # nothing is said.
        try:
            unread = list(self._pending.values())
        except BaseException:
            unread = []
        try:
            self.close(wait=not self._interrupted)
        except BaseException:
            pass
        try:
            if not self._interrupted:
                self._say_failed(unread)
        except BaseException:
            pass
        # A close cut short before it let go of the handle (Ctrl-C) left
        # the client open: this object and the arrays of its requests go
        # now, so the library's client is closed without waiting, or it
        # would write into freed arrays.
        try:
            if getattr(self, "_h", None) is not None:
                self.close(wait=False)
        except BaseException:
            pass

    def _say_failed(self, unread: List["Request"], _ok: int = PS_OK,
                    _warn=warnings.warn, _sys=sys) -> None:
        """Warns (RuntimeWarning; on stderr if that fails) when requests of
        unread failed. The module's globals are bound at definition: at
        the interpreter's end they may be None by the time this runs."""
        failed = [r for r in unread
                  if r._status is not None and r._status != _ok]
        if not failed:
            return
        first = failed[0]._message or f"status {failed[0]._status}"
        msg = (f"{self!r} was closed when dropped or at exit, with "
               f"{len(unread)} request(s) whose status no one had read: "
               f"{len(failed)} failed (wait() or wait_all() before the end "
               f"to see each); the first: {first}")
        try:
            _warn(msg, RuntimeWarning, stacklevel=3)
        except BaseException:
            _sys.stderr.write(f"psclient: {msg}\n")

    __reduce_ex__ = _not_copied

    def __repr__(self) -> str:
        if not hasattr(self, "worker"):
            # __init__ raised before it connected: a debugger showing the
            # frame's locals calls this too.
            return f"<psclient.Client {getattr(self, 'servers', '?')!r}, " \
                   f"not connected>"
        state = "closed" if self.closed else "open"
        who = f"worker {self.worker}" if self.worker >= 0 else "reader"
        return f"<psclient.Client {self.servers!r} {who}, {state}>"

    # -- calls --

    def _acquire(self, status_read: bool = False) -> Optional[int]:
        """Returns the handle and counts a running call, or raises
        ClosedError. A status read during close() waits for it to finish
        and returns None: close() read that status meanwhile. One from a
        signal handler while its own thread is in close(), or waits for
        its call to return to close, reads the status at once instead:
        waiting would wait for ever."""
        if self._forked():
            raise ClosedError(PS_ECLOSED, _FORKED)
        me = threading.get_ident()
        with self._lock:
            if status_read:
                # Until the close is over: its statuses are set after it
                # let go of the handle, before it lets go of _closer.
                while (self._closing and (self._h is not None or
                                          self._closer is not None) and
                       me not in (self._closer, self._close_later)):
                    self._cv.wait()
                if self._h is None:
                    return None
            elif self._h is None or self._closing:
                raise ClosedError(PS_ECLOSED, "the client was closed")
            # This thread's count first: a signal handler that runs in
            # between and calls close() then sees this call and closes
            # after it (_close_later), instead of waiting for it for ever.
            self._busy_in[me] = self._busy_in.get(me, 0) + 1
            self._busy += 1
            h = self._h
            if h is None:
                # A handler closed the client before this call counted.
                self._release()
                if status_read:
                    return None
                raise ClosedError(PS_ECLOSED, "the client was closed")
            return h

    def _release(self) -> None:
        me = threading.get_ident()
        with self._lock:
            self._busy -= 1
            if self._busy_in[me] == 1:
                del self._busy_in[me]
            else:
                self._busy_in[me] -= 1
            if self._busy == 0 and self._closing:
                self._cv.notify_all()
            later = self._close_later == me and me not in self._busy_in
            nowait = self._close_later_nowait
            if later:
                self._close_later = None
                self._close_later_nowait = False
        if later:
            self.close(wait=not nowait)  # asked for by a signal handler

    def _sliced(self, wait_slice) -> int:
        """Calls wait_slice() (a wait of _WAIT_SLICE_MS) until it returns
        something else than PS_PENDING: signal handlers run between the
        slices (one that raises ends the wait; requests stay in flight),
        and a close that does not wait ends it (ClosedError)."""
        try:
            while True:
                st = wait_slice()
                if st != PS_PENDING:
                    # A wait that ends in the thread that was interrupted:
                    # it went on after a Ctrl-C it caught, so __del__
                    # waits again and says failures (a trial's three
                    # pushes after such a recovery were cut off at the
                    # script's end, unsaid). Another thread's wait that
                    # ends says nothing of it (a review).
                    if self._interrupted == threading.get_ident():
                        self._interrupted = False
                    return st
                if self._abandon:
                    raise ClosedError(PS_ECLOSED, _ABANDONED)
        except KeyboardInterrupt:
            self._interrupted = threading.get_ident()
            raise

    def _wait(self, h: int, ts: int) -> int:
        """ps_wait, in slices (_sliced)."""
        return self._sliced(lambda: _LIB.ps_wait_timeout(h, ts,
                                                        _WAIT_SLICE_MS))

    def _wait_all(self, h: int) -> int:
        """ps_wait_all, in slices (_sliced)."""
        return self._sliced(lambda: _LIB.ps_wait_all_timeout(h,
                                                            _WAIT_SLICE_MS))

    def _fail(self, h: int, code: int) -> Error:
        """The exception for code, with this thread's ps_last_error text."""
        return _error(code, _LIB.ps_last_error(h).decode("utf-8", "replace"))

    def _hold(self, bufs: Tuple[np.ndarray, ...]) -> None:
        """Keeps the arrays of a request whose timestamp an exception took
        away until the next wait_all() or close(). A signal handler that
        raises (Ctrl-C) runs as soon as the library call it interrupted
        returns: the request is in flight by then, but its timestamp was
        never stored, so only ps_wait_all can tell when it completed."""
        with self._lock:
            self._held.append(bufs)

    def _call(self, fn, args: Sequence[object], bufs: Tuple[np.ndarray, ...],
              out: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """Issues a request and waits for it. bufs stay referenced by the
        caller's frame until then, or by _hold if an exception came first."""
        h = self._acquire()
        settled = False          # nothing of this call is in flight
        try:
            # Dropped async requests that completed let go of their
            # arrays here too, not only at the next *_async call.
            self._sweep(h)
            ts = fn(h, *args)
            if ts < 0:
                settled = True
                raise self._fail(h, ts)
            st = self._wait(h, ts)
            settled = True
            if st != PS_OK:
                raise self._fail(h, st)
        except BaseException:
            if not settled:
                self._hold(bufs)
            raise
        finally:
            self._release()
        return out

    def _submit(self, fn, args: Sequence[object],
                bufs: Tuple[np.ndarray, ...],
                out: Optional[np.ndarray]) -> Request:
        """Issues a request and returns its handle, registered as unread
        so that its arrays stay alive until its status is read."""
        # Memory stays bounded however many handles are dropped unread:
        # past _MAX_UNREAD, the oldest status is read, waiting for it
        # (usually complete already). Before this request is issued, so
        # that a Ctrl-C in that wait leaves nothing issued (after, it lost
        # the handle of the request it had just issued).
        while True:
            h = self._acquire()
            try:
                # The oldest requests that completed let go of their
                # arrays now: kept until their status was read, 1024
                # dropped pulls of 64 MiB held 64 GiB.
                self._sweep(h)
                with self._lock:
                    oldest = (next(iter(self._pending.values()))
                              if len(self._pending) >= _MAX_UNREAD
                              else None)
            finally:
                self._release()
            if oldest is None:
                break
            self._settle(oldest)
        h = self._acquire()
        settled = False          # refused, or registered in _pending
        try:
            ts = fn(h, *args)
            if ts < 0:
                settled = True
                raise self._fail(h, ts)
            req = Request(self, ts, bufs, out)
            with self._lock:
                self._pending[ts] = req
                settled = True
        except BaseException:
            if not settled:
                self._hold(bufs)
            raise
        finally:
            self._release()
        return req

    def _poll(self, req: Request) -> None:
        """Reads req's status if it completed, without waiting (not while
        the client closes: close() reads it)."""
        if self.closed:
            return
        try:
            h = self._acquire()
        except ClosedError:
            return
        try:
            st = _LIB.ps_wait_timeout(h, req.ts, 0)
            if st != PS_PENDING:
                self._record(h, req, st)
        finally:
            self._release()

    def _record(self, h: int, req: Request, st: int) -> None:
        """Keeps req's status st (with this thread's ps_last_error for an
        error) unless one was kept already, and lets go of its arrays."""
        msg = _LIB.ps_last_error(h).decode("utf-8", "replace") if st else ""
        with self._lock:
            if req._status is None:
                req._status, req._message = st, msg
            req._bufs = None
            self._pending.pop(req.ts, None)

    def _sweep(self, h: int) -> None:
        """Reads the status of the oldest unread requests that have
        completed, oldest first, up to the first still in flight; never
        waits. Called with h in use."""
        while True:
            with self._lock:
                req = next(iter(self._pending.values()), None)
            if req is None:
                return
            st = _LIB.ps_wait_timeout(h, req.ts, 0)
            if st == PS_PENDING:
                return
            self._record(h, req, st)

    def _read_status(self, h: int, req: Request) -> None:
        """ps_wait for req on handle h; records the status and lets go of
        its arrays. Called with h in use (counted busy, or by close)."""
        self._record(h, req, self._wait(h, req.ts))

    def _settle(self, req: Request) -> None:
        h = self._acquire(status_read=True)
        if h is None:                    # close() read it
            return
        try:
            self._read_status(h, req)
        finally:
            self._release()

    def table(self, name: str) -> Table:
        """The table called ``name``; raises TableError if the cluster has
        none."""
        if not isinstance(name, str):
            # bytes made a second Table beside the str one, named
            # "b'emb'" in messages; a bytearray is no cache key.
            raise TypeError(f"name: expected a str, got {_describe(name)}")
        cname = _cstr("name", name)
        t = self._tables.get(name)
        if t is not None:
            if self.closed:      # as any other call on a closed client
                raise ClosedError(PS_ECLOSED, _FORKED if self._forked()
                                  else "the client was closed")
            return t
        info = _lib.PsTableInfo()
        h = self._acquire()
        try:
            rc = _LIB.ps_table(h, cname, ctypes.byref(info))
            if rc < 0:
                raise self._fail(h, rc)
        finally:
            self._release()
        # Two threads asking for a new table at once both get the one
        # kept first (each made a Table of its own before).
        made = Table(self, name, info)
        with self._lock:
            t = self._tables.get(name)
            if t is None:
                self._tables[name] = t = made
        return t

    def wait_all(self) -> None:
        """Blocks until every request issued so far completed. Raises the
        first error among the requests that completed since the previous
        wait_all (ps_wait_all), after reading the status of each; also one
        already raised by that request's own wait, so threads sharing a
        client that each call wait_all may see another's handled error."""
        h = self._acquire()
        try:
            with self._lock:
                issued = list(self._pending.values())
                # Those of requests issued so far, counted from the
                # client's first: another thread's wait_all may let go
                # of some of them meanwhile, and of no others.
                held = self._held_gone + len(self._held)
            st = self._wait_all(h)
            err = self._fail(h, st) if st != PS_OK else None
            for req in issued:           # complete: ps_wait returns at once
                self._read_status(h, req)
            with self._lock:
                n = held - self._held_gone
                if n > 0:
                    del self._held[:n]
                    self._held_gone += n
        finally:
            self._release()
        if err is not None:
            # Not `raise err`: the frame would hold the exception that
            # holds the frame (its traceback), and self with them, so a
            # client dropped after a failed wait_all stayed open (its
            # worker id taken) until the garbage collector ran.
            try:
                raise err
            finally:
                del err

    def stats(self, node: Optional[int] = None) -> dict:
        """What the client measured since it was opened or since
        reset_stats() (ps_stats; for one node of the cluster, ps_stats_node):
        per kind of request used since ("push", "pull", ...; a kind with
        no request is absent: ``stats().get("push")`` is None then) the
        requests, errors, parts, payload bytes and latency quantiles in
        microseconds (p50_us, p90_us, p99_us, max_us), then frames and
        bytes on the
        wire, payload among them, time blocked on max_inflight_bytes and
        in clock/barrier, timeouts, resends, duplicates, reconnects, and
        clocks_skipped and barriers_skipped (how far this worker's counts
        moved when it rejoined after being let go)."""
        if node is not None:
            node = _node(node)
        s = _lib.PsStats()
        h = self._acquire()
        try:
            rc = (_LIB.ps_stats(h, ctypes.byref(s)) if node is None else
                  _LIB.ps_stats_node(h, node, ctypes.byref(s)))
            if rc != PS_OK:
                # ps_stats_node says which node in ps_last_error.
                raise self._fail(h, rc)
        finally:
            self._release()
        return _lib.stats_dict(s)

    def stats_line(self) -> str:
        """The statistics as one line for people (ps_stats_format), e.g.
        "push 100 p50 120 us p99 540 us, overhead 1.8%, resends 0"."""
        s = _lib.PsStats()
        h = self._acquire()
        try:
            _LIB.ps_stats(h, ctypes.byref(s))
        finally:
            self._release()
        buf = ctypes.create_string_buffer(1024)
        _LIB.ps_stats_format(ctypes.byref(s), buf, len(buf))
        return buf.value.decode()

    def reset_stats(self) -> None:
        """Starts the statistics afresh (ps_stats_reset)."""
        h = self._acquire()
        try:
            _LIB.ps_stats_reset(h)
            self._skipped_said = 0
        finally:
            self._release()

    def clock(self) -> None:
        """This worker finished its current iteration (ps_clock). On a
        cluster with bsp tables it returns once every live worker has, and
        the iteration's pushes were applied. Workers only. It blocks at
        most sync_timeout_ms, then raises TimeoutError. Ctrl-C ends the
        wait as it does a request's (KeyboardInterrupt): the clock is still
        under way, and the next clock() waits for that one rather than
        count another (a Ctrl-C that lands as the clock completes says so
        instead: "clock N completed as the interrupt came"); until it has
        (or after a clock() that failed, until one succeeds), a push to a
        bsp table raises InvalidError (it would count in that clock). Call
        it from one thread of a worker at a time: while one thread is in
        clock(), another's raises InvalidError at once, counting nothing
        (barrier() likewise)."""
        self._sync(_LIB.ps_clock_timeout, 0)
        self._say_skipped()

    def _sync(self, fn, barrier: int) -> None:
        """ps_clock_timeout or ps_barrier_timeout, in slices (_sliced).
        A Ctrl-C that lands as the clock completes is raised as the
        library call returns, its status lost: the clock is done, where a
        bare KeyboardInterrupt says it is under way and that the next
        clock() finishes it (a trial's worker then counted one clock
        ahead of the others). ps_sync_outstanding tells the two apart, and
        the KeyboardInterrupt says which."""
        h = self._acquire()
        mine = False             # this call set _in_sync[barrier]
        try:
            what = "barrier" if barrier else "clock"
            with self._lock:
                if self._in_sync[barrier]:
                    raise InvalidError(
                        PS_EINVAL, f"{what}(): another thread of this "
                        f"worker is in {what}() now: a worker's {what}s are "
                        f"its own steps, made by one thread at a time")
                mine = True
                self._in_sync[barrier] = True
            was = self._interrupted
            try:
                st = self._sliced(lambda: fn(h, _WAIT_SLICE_MS))
            except KeyboardInterrupt:
                if _LIB.ps_sync_outstanding(h, barrier) != 0:
                    raise
                self._interrupted = was      # no wait was cut short
                k, b = self.position()
                raise KeyboardInterrupt(
                    f"{what} {b if barrier else k} completed as the "
                    f"interrupt came: it is done, and the next {what}() "
                    f"counts the next one") from None
            if st != PS_OK:
                raise self._fail(h, st)
        finally:
            if mine:
                self._in_sync[barrier] = False
            self._release()

    def _skipped(self) -> int:
        """clocks_skipped + barriers_skipped, read without the whole
        stats() dict: it runs after every clock() and barrier()."""
        s = self._stats_buf
        h = self._acquire()
        try:
            _LIB.ps_stats(h, ctypes.byref(s))
        finally:
            self._release()
        return s.clocks_skipped + s.barriers_skipped

    def _say_skipped(self) -> None:
        """Warns (RuntimeWarning) when this worker rejoined past clocks or
        barriers the job went on without it: lost for longer than
        worker_grace, it was let go, and its calls succeed at the
        cluster's counts (position() jumped). Counted in
        stats()["clocks_skipped"] and ["barriers_skipped"]."""
        n = self._skipped()
        if n > self._skipped_said:
            warnings.warn(
                f"worker {self.worker} rejoined the cluster after its "
                f"connection was lost for longer than worker_grace: its "
                f"clock and barrier counts moved on {n - self._skipped_said} "
                f"in all, to the cluster's (it is now at clock "
                f"{self.position()[0]})", RuntimeWarning, stacklevel=3)
        self._skipped_said = n

    def barrier(self) -> None:
        """Returns once every live worker has called barrier() as often
        (ps_barrier). Workers only. Like clock(), it blocks at most
        sync_timeout_ms, after Ctrl-C the next barrier() waits for the
        one cut short, and while one thread is in barrier(), another's
        raises InvalidError at once."""
        self._sync(_LIB.ps_barrier_timeout, 1)
        self._say_skipped()

    def position(self) -> Tuple[int, int]:
        """(clock, barrier): where this worker stands (ps_position), the
        numbers of its last clock() and barrier() (one that failed counts:
        the next call retries it), or those the nodes gave it at connect (a worker that rejoins, or a new
        process for a lost one, starts at the nodes' counts, not at 0).
        A trainer restarted in the middle of a job lines its steps up
        with them. The counts do not start again at 0 for a new job on
        long-lived nodes: a job starts where the one before ended, so a
        trainer keeps its own step (or the position it read when its job
        began). Workers only: a reader raises InvalidError."""
        k, b = ctypes.c_uint64(), ctypes.c_uint64()
        h = self._acquire()
        try:
            rc = _LIB.ps_position(h, ctypes.byref(k), ctypes.byref(b))
            if rc != PS_OK:
                raise self._fail(h, rc)
        finally:
            self._release()
        return k.value, b.value


def connect(servers_or_ini: Union[str, os.PathLike], worker: int = -1,
            auth_token: Union[str, bytes, None] = None, *,
            connect_timeout_ms: Optional[int] = None,
            request_timeout_ms: Optional[int] = None,
            max_retries: Optional[int] = None,
            batch_delay_us: Optional[int] = None,
            max_inflight_bytes: Optional[int] = None,
            sync_timeout_ms: Optional[int] = None,
            busy_poll_us: Optional[int] = None) -> Client:
    """Connects to a psd cluster and returns a Client (ps_open).

    ``servers_or_ini``: "host:port[,host:port...]" of any psd nodes (the
    layout is fetched from them), or the path of the cluster's ini file.
    ``worker``: 0..workers-1 for clients that train bsp/ssp tables, -1 for
    a reader that nobody waits for. The other options are those of
    ``struct ps_options``; None keeps the library's default (see
    ``default_options()``). ``auth_token`` is passed to the library as is.
    A worker id held by another client's connection (perhaps a crashed
    process's that the nodes have not yet seen close) is retried for
    ``connect_timeout_ms``, then raises ConnectionError (PS_EBUSY,
    "worker 0 is already connected from ...").
    A worker whose connecting fails part way (a node that did not answer
    within ``connect_timeout_ms``) is taken in by no node of release 0.3.4
    or later: each puts it back as it was, and a bsp or ssp job waits for
    it as before; connect again.
    A new process for a bsp worker lost in the middle of an iteration
    starts after that iteration: this returns once the other workers have
    finished it (up to ``sync_timeout_ms``; see ps_open in psclient.h).
    Ctrl-C (KeyboardInterrupt) ends any of these waits at once: the
    connecting goes on in a thread of its own, which closes what it
    opened when it finishes (while the process lives; a worker id it
    held is taken until then, so connecting again at once as the same
    worker may wait for it).
    Raises an Error subclass (ConnectionError, TimeoutError, AuthError,
    InvalidError...) when the connection cannot be made.
    """
    return Client(servers_or_ini, worker, auth_token,
                  connect_timeout_ms=connect_timeout_ms,
                  request_timeout_ms=request_timeout_ms,
                  max_retries=max_retries, batch_delay_us=batch_delay_us,
                  max_inflight_bytes=max_inflight_bytes,
                  sync_timeout_ms=sync_timeout_ms,
                  busy_poll_us=busy_poll_us)
