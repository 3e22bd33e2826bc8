"""Compile at the training resolution (issue 26): full-size vs ``--resize HxW`` compiles of one source, in one run.

1. Compile: the source compiled at full size and with ``--resize HxW`` (same workers, preset and CRF), alternated
   ``compile_repeats`` times (full, resized, full, resized, ...); wall seconds and output bytes of each.
2. Read: ``roboreel.loader`` over each compile, and ``LeRobotDataset(source)`` with torchvision's
   ``Resize([H, W], antialias=True)`` as its ``image_transforms`` (what users do today), alternated in every
   round (loader full, loader resized, LeRobot + Resize, ...), each run in a fresh process (external.py; LeRobot in
   its own venv), uint8 frames, the same batch size, workers and steady window (runner.RunConfig).

Nothing here asserts speed: numbers go to docs/benchmarks.md (issue 26's goals: the resized compile >= 3x the
full-size one through the loader and >= 10x LeRobotDataset + Resize; its compile no slower).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from roboreel.bench.external import run_external
from roboreel.bench.runner import RunConfig
from roboreel.compile import CompileSettings, compile_dataset


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def resize_benchmark(source: str, *, size: tuple[int, int], out: Path, cfg: RunConfig, repeats: int = 3,
                     compile_repeats: int = 1, workers: int = 2, settings: CompileSettings | None = None,
                     lerobot_python: str | None = None, echo: Any = print) -> dict[str, Any]:
    """Run both parts (module doc) and return every measurement plus medians; compiles are kept under ``out``."""
    settings = settings or CompileSettings()
    out.mkdir(parents=True, exist_ok=True)
    variants = {"full": settings, f"{size[0]}x{size[1]}": settings.replace(resize=size)}
    compiles: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for r in range(compile_repeats):
        for name, s in variants.items():
            dest = out / f"compiled-{name}"
            shutil.rmtree(dest, ignore_errors=True)
            t0 = time.perf_counter()
            report = compile_dataset(source, str(dest), settings=s, workers=workers, progress=False)
            secs = time.perf_counter() - t0
            compiles[name].append({"seconds": secs, "bytes": _dir_bytes(dest), "shard_bytes": report.bytes,
                                   "psnr_mean": report.psnr_mean, "psnr_min": report.psnr_min})
            echo(f"compile {name} #{r}: {secs:.1f}s, {_dir_bytes(dest) / 1e6:.1f} MB, "
                 f"PSNR mean {report.psnr_mean:.2f} dB (vs the encoder's input)")
    ucfg = replace(cfg, uint8=True)
    runs: list[dict[str, Any]] = []
    lerobot_cfg = replace(ucfg, resize=size)
    for r in range(repeats):
        for name in variants:
            res = run_external(sys.executable, "loader", "single", compiled=str(out / f"compiled-{name}"),
                               source=source, cfg=ucfg, repeat=r)
            res["variant"] = f"loader {name}"
            runs.append(res)
            echo(f"  loader {name:>9} #{r}: {res['samples_per_s']:8.1f} samples/s")
        if lerobot_python:
            res = run_external(lerobot_python, "lerobot", "single", compiled="", source=source, cfg=lerobot_cfg,
                               repeat=r)
            res["variant"] = f"lerobot + Resize({size[0]}x{size[1]})"
            runs.append(res)
            echo(f"  {res['variant']} #{r}: {res['samples_per_s']:8.1f} samples/s")
    med = {v: statistics.median(x["samples_per_s"] for x in runs if x["variant"] == v)
           for v in dict.fromkeys(x["variant"] for x in runs)}
    comp = {name: {"seconds": statistics.median(c["seconds"] for c in cs),
                   "bytes": statistics.median(c["bytes"] for c in cs),
                   "psnr_mean": cs[0]["psnr_mean"], "psnr_min": min(c["psnr_min"] or 0 for c in cs)}
            for name, cs in compiles.items()}
    return {"source": source, "size": list(size), "config": asdict(ucfg), "repeats": repeats, "workers": workers,
            "compile": comp, "compile_runs": compiles, "samples_per_s": med, "runs": runs}


def markdown(result: dict[str, Any]) -> str:
    """Two tables: compile time and size; read samples/s with ratios to the full-size loader and to LeRobot."""
    comp = result["compile"]
    lines = ["| compile | seconds | output MB | PSNR mean / min dB (vs encoder input) |", "|---|---|---|---|"]
    for name, c in comp.items():
        lines.append(f"| {name} | {c['seconds']:.1f} | {c['bytes'] / 1e6:.1f} | "
                     f"{c['psnr_mean']:.2f} / {c['psnr_min']:.2f} |")
    sps = result["samples_per_s"]
    full = next((v for k, v in sps.items() if k == "loader full"), None)
    lerobot = next((v for k, v in sps.items() if k.startswith("lerobot")), None)
    lines += ["", "| reader | samples/s | x loader full | x LeRobot + Resize |", "|---|---|---|---|"]
    for name, v in sps.items():
        lines.append(f"| {name} | {v:.0f} | {v / full:.2f} | " + (f"{v / lerobot:.1f} |" if lerobot else "- |"))
    return "\n".join(lines)
