"""Numeric parquet columns as numpy ``[rows, *shape]``, in their stored dtype.

LeRobot stores a feature of shape [1] as a scalar column, [n] as a fixed-size list (HF ``Sequence(length=n)``)
and 2 to 5 dims as nested lists (HF ``Array2D`` ... ``Array5D``), which pyarrow reads as HF's extension types
where ``datasets`` is imported; their storage is the same nested lists. Shared by the reader (samples,
reader/plan/_rows.py) and compile (stats, compile/tables/_stats.py).
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


_KINDS = {"b": "bool", "i": "integer", "u": "integer", "f": "float"}


def _kind(dtype: str) -> str | None:
    try:
        return _KINDS.get(np.dtype(dtype).kind)
    except TypeError:
        return None


def declared_type_problem(feature: dict, typ: pa.DataType) -> str | None:
    """Why a data parquet column of Arrow type ``typ`` is not the numeric feature info.json declares (``dtype``,
    ``shape``), or None when it is (or the feature is not numeric: images, strings, language).

    LeRobot casts every column to the feature info.json declares (``get_hf_features_from_features``: shape [1]
    a scalar ``Value``, [n] a ``Sequence(length=n)``, 2 to 5 dims ``ArrayND``), so a column of another shape
    fails its load, and one of another kind of number (integers declared float32, floats declared int64)
    comes back in the declared dtype, not the stored one that roboreel carries. Both are refused; within one
    kind (float64 stored, float32 declared) the reader already returns what LeRobot does.
    """
    want_kind = _kind(str(feature.get("dtype")))
    if want_kind is None:
        return None
    shape = [int(x) for x in feature.get("shape") or []]
    want = [] if shape == [1] else shape
    got: list[int | None] = []
    leaf = typ
    while True:
        if isinstance(leaf, pa.ExtensionType):
            leaf = leaf.storage_type
        if pa.types.is_fixed_size_list(leaf):
            got.append(leaf.list_size)
        elif pa.types.is_list(leaf) or pa.types.is_large_list(leaf):
            got.append(None)  # lengths are per row
        else:
            break
        leaf = leaf.value_type
    numeric = pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_boolean(leaf)
    got_kind = _kind(str(leaf.to_pandas_dtype().__name__)) if numeric else None
    declared = f"{feature.get('dtype')} of shape {shape}"
    if got_kind is None:
        return f"is {typ}, not numbers; info.json declares {declared}"
    if len(got) != len(want) or any(g is not None and g != w for g, w in zip(got, want, strict=True)):
        stored = "a scalar" if not got else "[" + ", ".join("?" if g is None else str(g) for g in got) + "]"
        return f"is {typ} (shape {stored}), info.json declares {declared}: LeRobot cannot load it"
    if got_kind != want_kind:
        return (f"holds {got_kind} values ({typ}), info.json declares {declared}: LeRobot returns them cast to "
                f"{feature.get('dtype')}")
    return None


def undeclared_columns(names: list[str], features: dict) -> list[str]:
    """Data parquet columns info.json does not declare as a feature (LeRobot's load refuses the file)."""
    return [n for n in names if n not in features]


def null_rows(col: pa.ChunkedArray | pa.Array) -> list[int]:
    """Rows of ``col`` that are null or hold a null at any nesting level (a vector with one missing element).

    LeRobot turns such a row into ``None`` (or fails to make its tensor) while the other rows are tensors, and the
    reader would have to return the column as Python lists: a numeric feature with a null is refused, in compile
    and in validate. Cheap where there is none (null counts only); the rows are found the slow way otherwise."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not _any_null(arr):
        return []
    return [i for i, v in enumerate(arr.to_pylist()) if _holds_none(v)]


def _any_null(arr: pa.Array) -> bool:
    while True:
        if isinstance(arr.type, pa.ExtensionType):
            arr = arr.storage
        if arr.null_count:
            return True
        typ = arr.type
        if not (pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ)):
            return False
        arr = arr.flatten()


def _holds_none(v: object) -> bool:
    return v is None or (isinstance(v, list) and any(_holds_none(x) for x in v))


def is_numeric_feature(feature: dict) -> bool:
    """A feature info.json declares as numbers (bool, integers, floats), stored in the data parquet."""
    return _kind(str(feature.get("dtype"))) is not None
