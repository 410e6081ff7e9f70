"""Reading a model that ``psd --export DIR`` wrote from the nodes'
snapshots and journals. The README's "Exporting a model" describes the
files.

This file needs numpy only (no libpsclient, no cluster), so it may be
copied to a machine without psd: ``python3 export.py [--partial] DIR
model.npz``
gathers an export into one .npz file that ``numpy.load`` reads anywhere
(a dense table under its name; a sparse one as NAME.keys and NAME.values).
Importing it as ``psclient.read_export`` goes through the package, which
loads libpsclient."""

import json
import os
import re
import stat
import sys
import zlib
from typing import Dict, Tuple, Union

import numpy as np

Exported = Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]

# As psd names them: no leading zero, and node numbers up to 65535 (psd
# --import passes over any other name, as this does).
_MANIFEST = re.compile(r"export\.node(0|[1-9]\d{0,4})\.json")
# psd --export's mark of a node whose files it is still writing.
_PARTIAL = re.compile(r"export\.node(\d+)\.partial")


# What reading a damaged or hand-made file may raise besides ValueError:
# a shape past 2^63 (OverflowError), a claim of more rows than memory
# holds (MemoryError), a file cut short (EOFError).
_DAMAGED = (OSError, ValueError, KeyError, TypeError, OverflowError,
            MemoryError, EOFError)


def _why(e: BaseException) -> str:
    """What reading an array raised, said plainly: numpy calls any file
    that does not begin as an .npy one pickled data it will not load."""
    if isinstance(e, ValueError) and "pickled" in str(e):
        return "not an .npy file (it does not begin with \\x93NUMPY)"
    return repr(e)


def _open(where: str):
    """A binary file object of ``where``, a regular file (a FIFO put in
    an export's place hung the read for good), or ValueError;
    FileNotFoundError as open() raises it."""
    fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{where}: not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _plain(name: str) -> bool:
    """Whether ``name`` is a file name of the export's own folder, as psd
    --export writes them: a manifest that names a path would read a file
    from anywhere into the model."""
    return (name not in ("", ".", "..") and not name.startswith(".") and
            "/" not in name and "\\" not in name and os.sep not in name)


def _manifest(where: str) -> dict:
    """The JSON object of manifest ``where`` (format 1), or ValueError."""
    try:
        with _open(where) as f:
            m = json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, RecursionError) as e:
        # RecursionError: JSON nested deeper than the parser goes.
        raise ValueError(f"{where}: not a manifest psd --export wrote: "
                         f"{type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(m, dict) or m.get("format") != 1:
        raise ValueError(f"{where}: export format "
                         f"{m.get('format') if isinstance(m, dict) else m!r}"
                         f", this psclient reads 1")
    return m


def _int(v: object, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _checked(where: str, m: dict) -> dict:
    """m, if it has the shape of a node's manifest: its numbers and its
    tables' entries, each of the type psd writes; else ValueError naming
    where. A damaged or hand-made manifest raised TypeError or KeyError
    from deep in read_export, and export.py's command line a traceback."""
    tables = m.get("tables")
    ok = (_int(m.get("node"), 0) and _int(m.get("nodes"), 1) and
          _int(m.get("shards"), 1) and isinstance(tables, list))
    for t in tables if ok else []:
        ok = (isinstance(t, dict) and isinstance(t.get("name"), str) and
              t.get("kind") in ("dense", "sparse") and
              _int(t.get("dim"), 1) and _int(t.get("rows"), 0) and
              _int(t.get("count"), 0) and isinstance(t.get("keys"), str) and
              isinstance(t.get("values"), str) and _plain(t["keys"]) and
              _plain(t["values"]) and
              all(_int(t[c], 0) and t[c] <= 0xffffffff
                  for c in ("keys_crc32", "values_crc32") if c in t))
        if not ok:
            raise ValueError(f"{where}: not a manifest psd --export wrote "
                             f"(a table entry: {t!r:.200})")
    if not ok:
        raise ValueError(f"{where}: not a manifest psd --export wrote (its "
                         f"node, nodes, shards or tables)")
    return m


def _older_manifests(path: Union[str, os.PathLike]) -> list:
    """The manifests of an export written by a psd of before export.nodeN.json
    (one export.json for every node, each table listing its nodes' files),
    as one per node, the shape read_export takes; [] when there is none.
    ``psd --import`` reads both layouts too."""
    where = os.path.join(path, "export.json")
    try:
        m = _manifest(where)
    except FileNotFoundError:
        return []
    try:
        nodes = sorted({int(s["node"]) for s in m["snapshots"]} |
                       {int(f["node"]) for t in m["tables"]
                        for f in t["files"]})
        return [_checked(where, {
                    "node": i, "nodes": m["nodes"], "shards": m["shards"],
                    "tables": [dict({k: v for k, v in t.items()
                                     if k != "files"}, **f)
                               for t in m["tables"] for f in t["files"]
                               if int(f["node"]) == i]})
                for i in nodes]
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        # OverflowError: a node of Infinity.
        raise ValueError(f"{where}: not a manifest psd --export wrote (its "
                         f"snapshots, nodes, shards or tables)") from None


def read_export(path: Union[str, os.PathLike],
                partial: bool = False) -> Dict[str, Exported]:
    """The tables of the export in folder ``path``, by name.

    A dense table is one ``(rows, dim)`` float32 array, row ``r`` at index
    ``r``. A sparse table is ``(keys, values)``: a uint64 array of its keys
    and the ``(len(keys), dim)`` float32 array of their rows, in no
    particular order (``dict(zip(keys.tolist(), values))`` to look keys
    up). An export of only some of the cluster's nodes (``psd --export
    -n`` of some of them) raises ValueError, as does a dense
    table with a row missing or given twice, or a sparse table with a key
    given twice, unless ``partial``: then the tables hold what the export
    has, a dense table's missing rows NaN. So does anything else that is
    not what psd --export wrote: a manifest naming a path rather than a
    file of ``path``, a file that is not a regular file, a damaged
    array (one whose CRC-32 is not the one its manifest lists)."""
    # One manifest per node (export.nodeN.json): nodes exported one by one
    # (psd --export -n, on several hosts) gather in one folder.
    manifests = []
    for name in sorted(os.listdir(path)):
        part = _PARTIAL.fullmatch(name)
        if part:
            raise ValueError(f"{path}: holds {name}: psd --export of node "
                             f"{part.group(1)} did not finish replacing that "
                             f"node's files (killed, or failed, while it put "
                             f"them in place), so they are not whole; run "
                             f"psd --export into this folder again")
        # export.nodeN.json exactly, as psd names them (not a copy a file
        # manager made, "export.node0 (copy).json").
        if (not _MANIFEST.fullmatch(name) or
                int(_MANIFEST.fullmatch(name).group(1)) > 65535):
            continue
        where = os.path.join(path, name)
        try:
            m = _manifest(where)
        except FileNotFoundError as e:   # gone since listdir
            raise ValueError(f"{where}: not a manifest psd --export wrote: "
                             f"{e}") from None
        if m.get("node") != int(_MANIFEST.fullmatch(name).group(1)):
            raise ValueError(f"{where}: not a manifest psd --export wrote "
                             f"(its node, nodes, shards or tables)")
        manifests.append(_checked(where, m))
    if not manifests:
        manifests = _older_manifests(path)
    if not manifests:
        raise ValueError(f"{path}: no export.nodeN.json: not a folder "
                         f"psd --export wrote")
    nodes = manifests[0]["nodes"]
    if any(m["nodes"] != nodes or m["shards"] != manifests[0]["shards"]
           for m in manifests):
        raise ValueError(f"{path}: its nodes were exported from clusters of "
                         f"other node counts or shards")
    have = sorted(m["node"] for m in manifests)
    if len(set(have)) != len(have) or not all(0 <= h < nodes for h in have):
        raise ValueError(f"{path}: manifests of nodes {have} for a cluster "
                         f"of {nodes}: one is not psd's")
    if len(have) != nodes and not partial:
        raise ValueError(f"{path}: the export holds nodes {have} of {nodes}: "
                         f"its tables lack the others' rows; partial=True "
                         f"(export.py --partial) reads it anyway")
    tables: Dict[str, dict] = {}
    for m in manifests:
        for t in m["tables"]:
            first = tables.setdefault(t["name"], dict(t, files=[]))
            if any(first[k] != t[k] for k in ("kind", "dim", "rows")):
                raise ValueError(f"{path}: table {t['name']!r} has another "
                                 f"shape in node {m['node']}'s export")
            first["files"].append(t)
    out: Dict[str, Exported] = {}
    for t in tables.values():
        dim = int(t["dim"])
        keys, values = [], []
        for part in t["files"]:
            # The file being read, named when it fails (a damaged keys
            # file was named as its values file).
            name = part.get("keys", "?")
            try:
                with _open(os.path.join(path, part["keys"])) as f:
                    k = np.load(f)
                name = part.get("values", "?")
                with _open(os.path.join(path, part["values"])) as f:
                    v = np.load(f)
                count = part["count"]
            except _DAMAGED as e:
                raise ValueError(f"{path}: table {t['name']!r}: "
                                 f"{name}: {_why(e)}") from None
            if (not isinstance(k, np.ndarray) or
                    not isinstance(v, np.ndarray) or   # an .npz: NpzFile
                    k.dtype != np.uint64 or v.dtype != np.float32 or
                    k.shape != (count,) or
                    v.shape != (count, dim)):
                raise ValueError(f"{path}: {part['values']} does not match "
                                 f"its export.nodeN.json (table {t['name']!r})")
            # The CRC-32 psd --export lists (0.4.5 on), zlib's: a file
            # damaged, or another export's of as many rows, was read
            # without a word (a Python trial).
            for field, a, fname in (("keys_crc32", k, part["keys"]),
                                    ("values_crc32", v, part["values"])):
                if field not in part:
                    continue
                crc = zlib.crc32(memoryview(a).cast("B")) if a.size else 0
                if crc != part[field]:
                    raise ValueError(f"{path}: {fname}: its data are not "
                                     f"what its export.nodeN.json lists "
                                     f"(CRC-32): damaged, or replaced by "
                                     f"another export's file")
            keys.append(k)
            values.append(v)
        k = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
        v = (np.concatenate(values) if values
             else np.zeros((0, dim), np.float32))
        if t["kind"] == "sparse":
            # A key given twice (two nodes' files, or one) is two rows for
            # one key: psd --import refuses it, and so does this.
            srt = np.sort(k)
            twice = np.flatnonzero(srt[1:] == srt[:-1])
            if len(twice) and not partial:
                raise ValueError(f"{path}: sparse table {t['name']!r} has key "
                                 f"{int(srt[twice[0]])} more than once in "
                                 f"this export, want once; partial=True "
                                 f"(export.py --partial) reads it anyway")
            out[t["name"]] = (k, v)
            continue
        rows = int(t["rows"])
        if len(k) and int(k.max()) >= rows:
            raise ValueError(f"{path}: dense table {t['name']!r} has row "
                             f"{int(k.max())} of {rows}")
        # Whole, it holds each row once: said before a manifest's rows
        # claim memory (10^8 of them took 1.7 GB to find one row missing).
        if not partial and len(k) != rows:
            raise ValueError(f"{path}: dense table {t['name']!r} has "
                             f"{len(k)} rows in this export and {rows} in "
                             f"its manifests, want all; partial=True "
                             f"(export.py --partial) reads it anyway")
        try:
            seen = np.zeros(rows, np.int64)
            dense = np.full((rows, dim), np.nan, np.float32)
        except MemoryError:
            raise ValueError(f"{path}: dense table {t['name']!r} of {rows} "
                             f"rows of {dim} is more than this machine's "
                             f"memory holds") from None
        np.add.at(seen, k.astype(np.int64), 1)
        if not partial and (seen != 1).any():
            bad = int(np.flatnonzero(seen != 1)[0])
            raise ValueError(f"{path}: dense table {t['name']!r} has row "
                             f"{bad} {int(seen[bad])} times in this export, "
                             f"want once; partial=True (export.py --partial) "
                             f"reads it anyway")
        dense[k.astype(np.int64)] = v
        out[t["name"]] = dense
    return out


def _to_npz(path: str, npz: str, partial: bool = False) -> None:
    arrays = {}
    for name, table in read_export(path, partial=partial).items():
        if isinstance(table, tuple):
            arrays[name + ".keys"], arrays[name + ".values"] = table
        else:
            arrays[name] = table
    np.savez(npz, **arrays)


if __name__ == "__main__":
    args = sys.argv[1:]
    partial = "--partial" in args
    args = [a for a in args if a != "--partial"]
    usage = ("usage: python3 export.py [--partial] DIR OUT.npz  (DIR: what "
             "psd --export wrote; --partial: read an export that lacks some "
             "nodes' rows, or has a dense row or a sparse key twice: a row "
             "missing is NaN)")
    if args in (["--help"], ["-h"]):
        print(usage)
        sys.exit(0)
    if len(args) != 2 or any(a.startswith("--") for a in args):
        sys.exit(usage)
    try:
        _to_npz(args[0], args[1], partial)
    except _DAMAGED as e:
        sys.exit(f"export.py: {str(e) or type(e).__name__}")
