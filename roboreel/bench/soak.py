"""Soak benchmark: many epochs through one DataLoader with persistent workers, RSS of every process per epoch.

Small robot datasets are trained for hundreds of epochs, so memory that creeps per epoch matters more than a
peak. Not a timed test: run ``roboreel bench soak COMPILED --epochs 100`` and read the growth after the warm-up epochs.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class SoakConfig:
    epochs: int = 100
    warmup_epochs: int = 5  # epochs before growth is measured
    batch_size: int = 16
    num_workers: int = 2
    return_uint8: bool = True
    window_s: float = 1.0  # action window length: delta_timestamps {action: [0 .. window_s]}
    idle_decoders_mb: float | None = None  # DecodeOptions.idle_decoders_mb (None: the default)


def _rss_by_process(pid: int, *, exclude: frozenset[int] = frozenset()) -> dict[str, int]:
    """RSS of ``pid`` and of its descendants but ``exclude`` (processes that were there before the soak)."""
    root = psutil.Process(pid)
    out = {"main": root.memory_info().rss}
    mine = [c for c in root.children(recursive=True) if c.pid not in exclude]
    for i, child in enumerate(sorted(mine, key=lambda p: p.pid)):
        with contextlib.suppress(psutil.NoSuchProcess):
            out[f"worker{i}"] = child.memory_info().rss
    return out


def _environment() -> dict[str, str]:
    """What shapes the heap besides the code: allocator settings and the decoding stack's versions."""
    import torch
    import torchcodec

    env = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k in ("LD_PRELOAD", "MALLOC_CONF")}
    return {**env, "torch": torch.__version__, "torchcodec": torchcodec.__version__}


def _slope(ys: list[float]) -> float:
    """Least-squares growth per epoch: steadier than end minus start when RSS steps by whole pages."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in enumerate(ys)) / sum((x - mx) ** 2 for x in range(n))


def growth_after_warmup(rows: list[dict], warmup: int) -> dict[str, dict[str, float]]:
    """Per process: RSS after the warm-up epochs and at the end (MB), growth in percent, slope and peak."""
    if len(rows) <= warmup + 1:
        return {}
    a, b = rows[warmup]["rss"], rows[-1]["rss"]
    out = {}
    for k in a:
        if k not in b:
            continue
        series = [r["rss"][k] / 2**20 for r in rows[warmup:] if k in r["rss"]]
        out[k] = {"after_warmup_mb": a[k] / 2**20, "end_mb": b[k] / 2**20,
                  "growth_pct": 100 * (b[k] - a[k]) / a[k], "slope_mb_per_epoch": _slope(series),
                  "max_mb": max(series)}
    return out


def write_csv(rows: list[dict], path: Path) -> None:
    """One line per epoch: samples, seconds, decoders opened, RSS of every process in MB (``soak.csv``)."""
    procs = sorted({k for r in rows for k in r["rss"]}, key=lambda k: (k != "main", k))
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["epoch", "samples", "seconds", "decoder_opens", *(f"rss_{k}_mb" for k in procs)])
        for r in rows:
            w.writerow([r["epoch"], r["samples"], f"{r['seconds']:.3f}", r.get("decoder_opens", ""),
                        *(f"{r['rss'][k] / 2**20:.2f}" if k in r["rss"] else "" for k in procs)])


def soak(compiled: str, cfg: SoakConfig, out: Path, *, progress: bool = True) -> dict:
    """Run ``cfg.epochs`` epochs; write ``soak.json`` and ``soak.csv`` under ``out`` and return the json."""
    import torch

    from roboreel.formats.manifest import load_manifest
    from roboreel.reader import CompiledDataset
    from roboreel.reader.options import DecodeOptions

    fps = load_manifest(compiled).fps
    steps = max(1, round(cfg.window_s * fps))
    decode = DecodeOptions() if cfg.idle_decoders_mb is None else DecodeOptions(idle_decoders_mb=cfg.idle_decoders_mb)
    ds = CompiledDataset(compiled, return_uint8=cfg.return_uint8, decode=decode,
                         delta_timestamps={"action": [k / fps for k in range(steps)]})
    before = frozenset(c.pid for c in psutil.Process().children(recursive=True))  # not the soak's: left out
    loader = torch.utils.data.DataLoader(ds, batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                                         persistent_workers=cfg.num_workers > 0)
    rows = []
    opened = 0
    for epoch in range(cfg.epochs):
        ds.set_epoch(epoch)
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["index"])
        seconds, total = time.perf_counter() - t0, int(ds.stats()["decoder_opens"])  # opens: all processes
        rows.append({"epoch": epoch, "samples": n, "seconds": seconds, "decoder_opens": total - opened,
                     "rss": _rss_by_process(os.getpid(), exclude=before)})
        opened = total
        if progress:
            print(f"epoch {epoch}: {n} samples, " + ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in rows[-1]["rss"].items()),
                  flush=True)
    doc = {"compiled": compiled, "config": asdict(cfg), "environment": _environment(), "epochs": rows,
           "growth": growth_after_warmup(rows, cfg.warmup_epochs)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(doc, indent=1))
    write_csv(rows, out / "soak.csv")
    return doc
