"""Synthetic sources and their compiled forms for reader tests, built once per test run (support/shared.py).

``compiled_pair(tmp_path_factory, episodes_per_shard=1, **synth_overrides)`` returns ``(source, compiled)``
paths; the same arguments give the same (cached) directories for the rest of the session, across modules.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roboreel.synth import read
from support.settings import FAST
from support.shared import built_once

_SOURCES: dict[tuple, Path] = {}
_COMPILED: dict[tuple, Path] = {}


def _key(d: dict[str, Any]) -> tuple:
    """The overrides, and the synthesiser's task strings (a test may monkeypatch them: another dataset then)."""
    from roboreel.synth import generate

    return (*sorted((k, repr(v)) for k, v in d.items()), ("_TASKS", generate._TASKS))


def source(tmp_path_factory: Any, **overrides: Any) -> Path:
    """A synthetic LeRobot v3 source with conftest's SMALL settings, overridden by keyword (cached)."""
    from conftest import make_source

    key = _key(overrides)
    if key not in _SOURCES:
        _SOURCES[key] = built_once(tmp_path_factory, "source", key,
                                   lambda folder: make_source(folder / "src", **overrides))
    return _SOURCES[key]


def compiled_pair(tmp_path_factory: Any, *, episodes_per_shard: int = 2, compile_options: dict[str, Any] | None = None,
                  **overrides: Any) -> tuple[Path, Path]:
    """``(source, compiled)`` for SMALL-with-overrides compiled with test settings, ``episodes_per_shard`` and
    ``compile_options`` (CompileSettings fields)."""
    from roboreel.compile import compile_dataset

    src = source(tmp_path_factory, **overrides)
    key = (_key(overrides), episodes_per_shard, _key(compile_options or {}))
    if key not in _COMPILED:
        settings = dataclasses.replace(FAST, episodes_per_shard=episodes_per_shard, **(compile_options or {}))

        def build(folder: Path) -> Path:
            compile_dataset(str(src), str(folder / "compiled"), settings=settings, workers=1)
            return folder / "compiled"

        _COMPILED[key] = built_once(tmp_path_factory, "compiled", key, build)
    return src, _COMPILED[key]


def codes(frames: torch.Tensor) -> list[tuple[int, int, int]]:
    """Pixel codes (index, episode, camera) of a [C,H,W] frame or [T,C,H,W] stack."""
    stack = frames if frames.ndim == 4 else frames[None]
    return [tuple(dataclasses.astuple(read(f))) for f in stack]


def assert_same_sample(got: dict[str, Any], want: dict[str, Any], cameras: list[str], *,
                       min_psnr: float | None = None) -> None:
    """Same keys (in order), dtypes and shapes; camera frames equal by pixel code (with ``min_psnr``: every frame
    of uint8 cameras at least that many dB from the wanted one instead); everything else exactly."""
    assert list(got) == list(want), (list(got), list(want))
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor) and g.dtype == w.dtype and g.shape == w.shape, (k, g, w)
            if k in cameras and min_psnr is not None:
                from roboreel.compile.video import psnr

                pairs = zip(g.reshape(-1, *g.shape[-3:]), w.reshape(-1, *w.shape[-3:]), strict=True)
                worst = min(psnr(a.numpy(), b.numpy()) for a, b in pairs)
                assert worst >= min_psnr, (k, int(want["index"]), worst)
            elif k in cameras:
                assert codes(g) == codes(w), (k, int(want["index"]), codes(g), codes(w))
            else:
                assert torch.equal(g, w), (k, int(want["index"]), g, w)
        else:
            assert g == w, (k, g, w)


def batch_indices(batch: dict[str, Any]) -> list[int]:
    return [int(i) for i in np.asarray(batch["index"]).reshape(-1)]


def set_image_bytes(path: Path, key: str, row: int, data: bytes | None) -> None:
    """Replace the embedded bytes of one row of image feature ``key`` in the first row group of ``path`` (None: a
    path-only reference, no bytes), keeping the file's schema and row groups."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    groups = [pf.read_row_group(g) for g in range(pf.num_row_groups)]
    t = groups[0]
    col = t.column(key).combine_chunks()
    values = pc.struct_field(col, [0]).to_pylist()
    values[row] = data
    fixed = pa.StructArray.from_arrays([pa.array(values, pa.binary()), pc.struct_field(col, [1])],
                                       fields=list(col.type))
    groups[0] = t.set_column(t.column_names.index(key), key, fixed)
    with pq.ParquetWriter(path, pf.schema_arrow) as w:
        for g in groups:
            w.write_table(g)
