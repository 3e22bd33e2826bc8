"""The synthetic writer's non-numeric columns, written the way LeRobot 0.6.1 writes them.

- Image features (``SynthConfig(use_videos=False)``, LeRobot's ``use_videos=False``): each frame a PNG made by
  Pillow with ``compress_level=1`` (LeRobot's image writer default), embedded as HF ``datasets.Image``'s
  ``struct<bytes: binary, path: string>`` with the frame's file name as ``path`` (``frame-000007.png``).
- Language (``SynthConfig(language=True)``): ``language_persistent`` / ``language_events`` as
  ``lerobot-annotate``'s writer leaves them (pyarrow infers the list<struct> types from the rows; events carry a
  ``say`` tool call), plus a per-frame ``string`` feature, each value naming its frame so a test can tell them
  apart.
- The ``huggingface`` schema-metadata entry, with ``Image`` features as HF datasets records them.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pyarrow as pa
from PIL import Image

STRING_KEY = "annotation.note"
LANGUAGE_FEATURES = {  # lerobot.datasets.language.language_feature_info()
    "language_persistent": {"dtype": "language", "shape": [1], "names": None},
    "language_events": {"dtype": "language", "shape": [1], "names": None},
}


def png_bytes(frame: np.ndarray) -> bytes:
    """One RGB uint8 frame [H, W, 3] as LeRobot's image writer saves it."""
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def image_column(frames: list[np.ndarray]) -> pa.StructArray:
    """An episode's frames as an HF Image column (embedded PNG bytes and the frame file's name)."""
    return pa.StructArray.from_arrays(
        [pa.array([png_bytes(f) for f in frames], pa.binary()),
         pa.array([f"frame-{k:06d}.png" for k in range(len(frames))], pa.string())],
        names=["bytes", "path"])


def language_columns(ep: int, start: int, length: int, fps: int) -> dict[str, pa.Array]:
    """The string feature and both language columns of one episode (``start``: its first global index)."""
    persistent = [[{"role": "assistant", "content": f"plan of episode {ep}", "style": "plan", "timestamp": 0.0,
                    "camera": None, "tool_calls": None}]
                  + ([{"role": "assistant", "content": f"subtask from frame {length // 2}", "style": "subtask",
                       "timestamp": (length // 2) / fps, "camera": None, "tool_calls": None}]
                     if k >= length // 2 else [])
                  for k in range(length)]
    events = [[] if k % 3 else [{"role": "assistant", "content": None, "style": None, "camera": None,
                                 "tool_calls": [{"type": "function", "function": {
                                     "name": "say", "arguments": {"text": f"frame {start + k}"}}}]}]
              for k in range(length)]
    return {STRING_KEY: pa.array([f"note {start + k}" for k in range(length)], pa.string()),
            "language_persistent": pa.array(persistent), "language_events": pa.array(events)}


def _hf_feature(t: pa.DataType) -> object:
    if pa.types.is_struct(t) and {t.field(i).name for i in range(t.num_fields)} == {"bytes", "path"}:
        return {"_type": "Image"}
    if pa.types.is_struct(t):
        return {t.field(i).name: _hf_feature(t.field(i).type) for i in range(t.num_fields)}
    if pa.types.is_fixed_size_list(t) or pa.types.is_list(t):
        return {"feature": _hf_feature(t.value_type), "length": getattr(t, "list_size", -1), "_type": "Sequence"}
    return {"dtype": str(t), "_type": "Value"}


def hf_metadata(schema: pa.Schema, rel: str) -> dict[bytes, bytes]:
    """The `huggingface` schema-metadata entry HF datasets writes (features + a per-file fingerprint)."""
    info = {"info": {"features": {f.name: _hf_feature(f.type) for f in schema}},
            "fingerprint": hashlib.sha256(rel.encode()).hexdigest()[:16]}
    return {b"huggingface": json.dumps(info).encode()}
