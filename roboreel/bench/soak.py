"""Soak benchmark: many epochs through one DataLoader with persistent workers, RSS of every process per epoch.

Small robot datasets are trained for hundreds of epochs, so memory that creeps per epoch matters more than a
peak. Not a timed test: run ``roboreel bench --soak 100`` and read the growth after the warm-up epochs.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class SoakConfig:
    epochs: int = 100
    warmup: int = 5
    batch_size: int = 16
    num_workers: int = 2
    uint8: bool = True
    window_s: float = 1.0  # action window length: delta_timestamps {action: [0 .. window_s]}


def _rss_by_process(pid: int) -> dict[str, int]:
    root = psutil.Process(pid)
    out = {"main": root.memory_info().rss}
    for i, child in enumerate(sorted(root.children(recursive=True), key=lambda p: p.pid)):
        with contextlib.suppress(psutil.NoSuchProcess):
            out[f"worker{i}"] = child.memory_info().rss
    return out


def soak(compiled: str, cfg: SoakConfig, out: Path, *, progress: bool = True) -> dict:
    """Run ``cfg.epochs`` epochs; write ``soak.json`` under ``out`` and return it."""
    import torch

    from roboreel.formats.manifest import load_manifest
    from roboreel.reader import CompiledDataset

    fps = load_manifest(compiled).fps
    steps = max(1, round(cfg.window_s * fps))
    ds = CompiledDataset(compiled, return_uint8=cfg.uint8,
                         delta_timestamps={"action": [k / fps for k in range(steps)]})
    loader = torch.utils.data.DataLoader(ds, batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                                         persistent_workers=cfg.num_workers > 0)
    rows = []
    for epoch in range(cfg.epochs):
        ds.set_epoch(epoch)
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["index"])
        rows.append({"epoch": epoch, "samples": n, "seconds": time.perf_counter() - t0,
                     "rss": _rss_by_process(os.getpid())})
        if progress:
            print(f"epoch {epoch}: {n} samples, " + ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in rows[-1]["rss"].items()),
                  flush=True)
    growth = {}
    if len(rows) > cfg.warmup + 1:
        a, b = rows[cfg.warmup]["rss"], rows[-1]["rss"]
        growth = {k: {"after_warmup_mb": a[k] / 2**20, "end_mb": b[k] / 2**20,
                      "growth_pct": 100 * (b[k] - a[k]) / a[k]} for k in a if k in b}
    doc = {"compiled": compiled, "config": asdict(cfg), "epochs": rows, "growth": growth}
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(doc, indent=1))
    return doc
