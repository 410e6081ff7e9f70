"""Reading a model that ``psd --export DIR`` wrote from the nodes'
snapshots: numpy only, no connection to the cluster. The README's
"Exporting a model" describes the files."""

import json
import os
from typing import Dict, Tuple, Union

import numpy as np

Exported = Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]


def read_export(path: Union[str, os.PathLike],
                partial: bool = False) -> Dict[str, Exported]:
    """The tables of the export in folder ``path``, by name.

    A dense table is one ``(rows, dim)`` float32 array, row ``r`` at index
    ``r``. A sparse table is ``(keys, values)``: a uint64 array of its keys
    and the ``(len(keys), dim)`` float32 array of their rows, in no
    particular order (``dict(zip(keys.tolist(), values))`` to look keys
    up). The export holds the nodes whose snapshot was found; a dense
    table missing rows of a node that was not exported raises ValueError,
    unless ``partial``, which leaves those rows NaN (a sparse table then
    holds the exported nodes' keys only)."""
    with open(os.path.join(path, "export.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("format") != 1:
        raise ValueError(f"{path}: export format {manifest.get('format')!r}, "
                         f"this psclient reads 1")
    out: Dict[str, Exported] = {}
    for t in manifest["tables"]:
        dim = int(t["dim"])
        keys, values = [], []
        for part in t["files"]:
            k = np.load(os.path.join(path, part["keys"]))
            v = np.load(os.path.join(path, part["values"]))
            if (k.dtype != np.uint64 or v.dtype != np.float32 or
                    k.shape != (part["count"],) or
                    v.shape != (part["count"], dim)):
                raise ValueError(f"{path}: {part['values']} does not match "
                                 f"export.json (table {t['name']!r})")
            keys.append(k)
            values.append(v)
        k = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
        v = (np.concatenate(values) if values
             else np.zeros((0, dim), np.float32))
        if t["kind"] == "sparse":
            out[t["name"]] = (k, v)
            continue
        rows = int(t["rows"])
        if len(k) != rows and not partial:
            raise ValueError(f"{path}: dense table {t['name']!r} has "
                             f"{len(k)} of its {rows} rows in this export "
                             f"(a node without a snapshot?); "
                             f"partial=True leaves the others NaN")
        if len(k) and int(k.max()) >= rows:
            raise ValueError(f"{path}: dense table {t['name']!r} has row "
                             f"{int(k.max())} of {rows}")
        dense = np.full((rows, dim), np.nan, np.float32)
        dense[k.astype(np.int64)] = v
        out[t["name"]] = dense
    return out
