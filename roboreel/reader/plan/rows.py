"""Tabular columns as numpy, shaped like the features LeRobot returns (shared by both readers)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from roboreel.formats.table_features import LANGUAGE_COLUMNS, language_values, python_values


def column_array(col: pa.ChunkedArray | pa.Array, length: int, key: str | None = None) -> np.ndarray | list:
    """A parquet column as numpy: scalars ``[L]``, fixed-size lists ``[L, *shape]``; other types (strings,
    language columns, named by ``key``) as the Python values LeRobot gets from HF datasets
    (formats/table_features.py).

    A scalar column becomes a 0-dim tensor per sample, a fixed-size list a 1-D (or N-D) one, as in LeRobot's
    ``hf_transform_to_torch`` (features of shape [1] are stored as scalars).
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    shape: list[int] = []
    typ = arr.type
    while pa.types.is_fixed_size_list(typ):
        shape.append(typ.list_size)
        typ = typ.value_type
    if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ):
        flat = arr
        for _ in shape:
            flat = flat.flatten()
        out = flat.to_numpy(zero_copy_only=False).reshape(length, *shape)
        return out if out.flags.writeable else out.copy()  # torch refuses read-only (Arrow-owned) memory
    return language_values(arr, key) if key in LANGUAGE_COLUMNS else python_values(arr)
