"""Features that live in the data parquet but are not numbers: images (``dtype: "image"``), strings and LeRobot's
language columns. What their bytes are, and the checks that they can be carried exactly.

Images: LeRobot 0.6.1 (``use_videos=False``, and many Hub datasets) stores each frame as HF ``datasets.Image``:
a ``struct<bytes: binary, path: string>`` column whose ``bytes`` are the encoded file (PNG from LeRobot's image
writer, TIFF for raw depth maps; other writers also use JPEG), embedded by ``embed_images`` before the parquet is
written (lerobot/datasets/io_utils.py; ``get_hf_features_from_features`` maps ``image`` to ``datasets.Image()``).
roboreel keeps those encoded bytes as they are, in the rows of each shard record, so a sample is exactly what
LeRobot decodes. A row holding only a ``path`` (no bytes) refers to a file roboreel cannot carry: refused.

Language: ``language_persistent`` and ``language_events`` (lerobot/datasets/language.py) are lists of structs
written by ``lerobot-annotate``; ``LeRobotDataset`` returns them as Python lists of dicts, with ``tool_calls``
decoded from JSON where the column stores Arrow's JSON type (HF ``datasets.Json``). String columns come back as
``str``. Both travel as Arrow values in the record rows, never through pandas.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from roboreel.formats.errors import SourceError

IMAGE_DTYPE = "image"
LANGUAGE_COLUMNS = ("language_persistent", "language_events")  # lerobot.datasets.language.LANGUAGE_COLUMNS
# lerobot.datasets.language: the fields of one row of each column, in LeRobot's order
PERSISTENT_ROW_FIELDS = ("role", "content", "style", "timestamp", "camera", "tool_calls")
EVENT_ROW_FIELDS = ("role", "content", "style", "camera", "tool_calls")


def image_keys(features: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Features stored as encoded images in the data parquet, in info.json order."""
    return [k for k, f in features.items() if f.get("dtype") == IMAGE_DTYPE]


def _bytes_field(typ: pa.DataType) -> int | None:
    """Index of the binary ``bytes`` child of an HF Image struct, or None when ``typ`` is not one."""
    if not pa.types.is_struct(typ):
        return None
    i = typ.get_field_index("bytes")
    if i < 0:
        return None
    t = typ.field(i).type
    return i if pa.types.is_binary(t) or pa.types.is_large_binary(t) else None


def image_problem(column: pa.ChunkedArray | pa.Array) -> str | None:
    """Why an image column cannot be carried exactly (not an HF Image struct; rows without embedded bytes), or
    None when every row holds its encoded image."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    i = _bytes_field(arr.type)
    if i is None:
        return f"is {arr.type}, not an image struct<bytes: binary, path: string> (HF datasets.Image)"
    missing = pc.struct_field(arr, [i]).null_count  # a null struct is a null field too
    if missing:
        return (f"{missing} of {len(arr)} rows hold no embedded image bytes (a path only): the image files are "
                "not in the dataset, re-save it with LeRobot (images are embedded when episodes are saved)")
    return None


def check_image_columns(table: pa.Table, keys: list[str], *, file: str, episode: int | None = None) -> None:
    """Refuse (SourceError naming the file and episode) image columns that cannot be carried exactly."""
    for key in keys:
        if key not in table.column_names:
            continue  # a missing feature column is reported by the schema checks
        problem = image_problem(table.column(key))
        if problem:
            raise SourceError(f"image feature {key!r} {problem}", file=file, episode=episode)


def image_bytes(column: pa.ChunkedArray | pa.Array) -> list[bytes]:
    """The encoded image of every row (callers checked the column with ``image_problem``)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    i = _bytes_field(arr.type)
    if i is None:
        raise ValueError(f"not an image column: {arr.type}")
    return pc.struct_field(arr, [i]).to_pylist()


def _has_json(typ: pa.DataType) -> bool:
    if isinstance(typ, pa.JsonType):
        return True
    if pa.types.is_struct(typ):
        return any(_has_json(typ.field(i).type) for i in range(typ.num_fields))
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return _has_json(typ.value_type)
    return False


def _decode_json(value: Any, typ: pa.DataType) -> Any:
    if value is None:
        return None
    if isinstance(typ, pa.JsonType):
        return json.loads(value)
    if pa.types.is_struct(typ):
        return {typ.field(i).name: _decode_json(value[typ.field(i).name], typ.field(i).type)
                for i in range(typ.num_fields)}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return [_decode_json(v, typ.value_type) for v in value]
    return value


def python_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """A non-numeric column as the Python values HF ``datasets`` gives LeRobot: ``to_pylist``, with values of
    Arrow's JSON type parsed (``datasets.Json.decode_example`` is ``json.loads``)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    values = arr.to_pylist()
    return [_decode_json(v, arr.type) for v in values] if _has_json(arr.type) else values


def _language_row(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    out = {f: row.get(f) for f in fields}
    if out.get("timestamp") is not None and "timestamp" in fields:
        out["timestamp"] = float(np.float32(out["timestamp"]))
    return out | {k: v for k, v in row.items() if k not in out}


def language_values(column: pa.ChunkedArray | pa.Array, key: str) -> list[Any]:
    """A language column as ``LeRobotDataset`` returns it: HF datasets casts the parquet to LeRobot's row
    features on load (``language_persistent_row_feature``: ``timestamp`` float32, fields in its order, absent
    ones None), whatever types ``lerobot-annotate``'s inferred schema gave the file (it writes Python floats,
    float64). Other fields are kept as they are."""
    fields = PERSISTENT_ROW_FIELDS if key == "language_persistent" else EVENT_ROW_FIELDS
    return [None if rows is None else [None if r is None else _language_row(r, fields) for r in rows]
            for rows in python_values(column)]
