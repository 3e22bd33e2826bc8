"""Tabular columns as numpy, shaped and typed like the features LeRobot returns (shared by both readers).

LeRobot's ``hf_transform_to_torch`` (lerobot/datasets/io_utils.py) makes each row's value ``torch.tensor(x)`` of
the Python value HF datasets hands it, so what a sample holds is not the parquet's type: floats of any width
become torch's default float32 (a float64 column is rounded to float32, as ``torch.tensor`` of a Python float
does), integers of any width int64, booleans bool. A feature of shape [1] comes back 0-dim, [n] 1-D, 2 to 5 dims
N-D (formats/columns.py: how each is stored).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from roboreel.formats.columns import numeric_array
from roboreel.formats.table_features import LANGUAGE_COLUMNS, language_values, python_values


def lerobot_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of ``torch.tensor`` of a column's Python values: float32, int64 or bool."""
    if np.issubdtype(dtype, np.floating):
        return np.dtype(np.float32)
    if np.issubdtype(dtype, np.integer):
        return np.dtype(np.int64)
    return dtype


def column_array(col: pa.ChunkedArray | pa.Array, length: int, key: str | None = None) -> np.ndarray | list:
    """A parquet column as numpy ``[L, *shape]`` in LeRobot's dtype (module doc); other types (strings, language
    columns, named by ``key``) as the Python values LeRobot gets from HF datasets (formats/table_features.py)."""
    out = numeric_array(col)
    if out is None:
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        return language_values(arr, key) if key in LANGUAGE_COLUMNS else python_values(arr)
    if len(out) != length:
        raise ValueError(f"column {key!r} has {len(out)} rows, the episode {length}")
    want = lerobot_dtype(out.dtype)
    if out.dtype != want:  # a fresh array; float64 rounded to float32 (past its range: inf), as torch does
        with np.errstate(over="ignore"):
            return out.astype(want)
    return out if out.flags.writeable else out.copy()  # torch refuses read-only (Arrow-owned) memory
