"""Tabular columns as numpy, shaped and typed like the features LeRobot returns (shared by both readers).

LeRobot's ``hf_transform_to_torch`` (lerobot/datasets/io_utils.py) makes each row's value ``torch.tensor(x)`` of
the Python value HF datasets hands it, so what a sample holds is not the parquet's type:
- floats of any width become torch's default float32 (a float64 column is rounded to float32, as
  ``torch.tensor`` of a Python float does), integers of any width int64, booleans bool;
- a feature of shape [1] is stored as a scalar and comes back 0-dim; [n] as a fixed-size list, 1-D; a feature of
  2 to 5 dims (HF ``Array2D`` ... ``Array5D``) as nested lists, N-D. Where ``datasets`` is imported, pyarrow
  reads those columns as HF's extension types; their storage is the same nested lists.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from roboreel.formats.table_features import LANGUAGE_COLUMNS, language_values, python_values


def lerobot_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of ``torch.tensor`` of a column's Python values: float32, int64 or bool."""
    if np.issubdtype(dtype, np.floating):
        return np.dtype(np.float32)
    if np.issubdtype(dtype, np.integer):
        return np.dtype(np.int64)
    return dtype


def _nested_shape(arr: pa.Array) -> tuple[pa.Array, list[int]] | None:
    """``arr`` of (nested) lists unnested to its leaf values, with the per-row shape; None when a level holds a
    null or lists of different lengths (a ragged column, which no tensor holds)."""
    shape: list[int] = []
    while True:
        if isinstance(arr.type, pa.ExtensionType):  # HF's Array2D..5D, registered where ``datasets`` is imported
            arr = arr.storage
        typ = arr.type
        if pa.types.is_fixed_size_list(typ):
            if arr.null_count:
                return None
            shape.append(typ.list_size)
        elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
            if arr.null_count:
                return None
            lengths = pc.list_value_length(arr)
            if len(lengths) == 0:
                return None
            lo, hi = pc.min_max(lengths).values()
            if lo.as_py() != hi.as_py():
                return None
            shape.append(lo.as_py())
        else:
            return arr, shape
        arr = arr.flatten()


def column_array(col: pa.ChunkedArray | pa.Array, length: int, key: str | None = None) -> np.ndarray | list:
    """A parquet column as numpy ``[L, *shape]`` in LeRobot's dtype (module doc); other types (strings, language
    columns, named by ``key``) as the Python values LeRobot gets from HF datasets (formats/table_features.py)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    nested = _nested_shape(arr)
    if nested is not None:
        flat, shape = nested
        typ = flat.type
        if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ):
            out = flat.to_numpy(zero_copy_only=False).reshape(length, *shape)
            want = lerobot_dtype(out.dtype)
            if out.dtype != want:  # a fresh array; float64 rounded to float32 (past its range: inf), as torch does
                with np.errstate(over="ignore"):
                    return out.astype(want)
            return out if out.flags.writeable else out.copy()  # torch refuses read-only (Arrow-owned) memory
    return language_values(arr, key) if key in LANGUAGE_COLUMNS else python_values(arr)
