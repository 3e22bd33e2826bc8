"""Numeric parquet columns as numpy ``[rows, *shape]``, in their stored dtype.

LeRobot stores a feature of shape [1] as a scalar column, [n] as a fixed-size list (HF ``Sequence(length=n)``)
and 2 to 5 dims as nested lists (HF ``Array2D`` ... ``Array5D``), which pyarrow reads as HF's extension types
where ``datasets`` is imported; their storage is the same nested lists. Shared by the reader (samples,
reader/plan/rows.py) and compile (stats, compile/stats.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _unnested(arr: pa.Array) -> tuple[pa.Array, list[int]] | None:
    """``arr`` of (nested) lists unnested to its leaf values, with the per-row shape; None when a level holds a
    null or lists of different lengths (a ragged column, which no tensor holds)."""
    shape: list[int] = []
    while True:
        if isinstance(arr.type, pa.ExtensionType):
            arr = arr.storage
        typ = arr.type
        if pa.types.is_fixed_size_list(typ):
            if arr.null_count:
                return None
            shape.append(typ.list_size)
        elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
            if arr.null_count or len(arr) == 0:
                return None
            lo, hi = (s.as_py() for s in pc.min_max(pc.list_value_length(arr)).values())
            if lo != hi:
                return None
            shape.append(lo)
        else:
            return arr, shape
        arr = arr.flatten()


def numeric_array(col: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """The column as ``[rows, *shape]`` numpy of its stored dtype (possibly read-only, Arrow's memory), or None
    when it is not numbers of one shape (strings, structs, ragged or null lists)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    unnested = _unnested(arr)
    if unnested is None:
        return None
    flat, shape = unnested
    typ = flat.type
    if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)):
        return None
    return flat.to_numpy(zero_copy_only=False).reshape(len(arr), *shape)
