"""Compile one source two ways and read both, in one run: what a compile option costs and what it buys.

Two uses (``roboreel bench resize SRC --size HxW`` / ``roboreel bench images SRC``):
- ``--resize HxW``: full size vs resized at compile; LeRobot reads the source with torchvision's
  ``Resize([H, W], antialias=True)`` as its ``image_transforms`` (what users do today); uint8 frames.
- ``--images clips``: image features kept as the source's encoded images vs compiled as HEVC clips;
  LeRobot reads the source as it is.

1. Compile: each variant (same workers, preset, CRF), alternated ``compile_repeats`` times; wall seconds, output
   bytes and the compile report's PSNR.
2. Read: ``roboreel.loader`` over each compile and ``LeRobotDataset(source)``, alternated in every round, each run in
   a fresh process (external.py; LeRobot in its own venv), the same batch size, workers and steady window
   (runner.RunConfig).

Nothing here asserts speed: numbers go to docs/benchmarks.md and docs/format.md.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from roboreel.bench.config import RunConfig
from roboreel.bench.external import run_external
from roboreel.bench.report import ORDER_FIELDS, order_cell
from roboreel.compile import CompileSettings, compile_dataset


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def variants_benchmark(source: str, variants: dict[str, CompileSettings], *, out: Path, cfg: RunConfig,
                       lerobot_cfg: RunConfig | None, lerobot_name: str = "lerobot", repeats: int = 3,
                       compile_repeats: int = 1, workers: int = 2, lerobot_python: str | None = None,
                       echo: Any = print) -> dict[str, Any]:
    """Run both parts (module doc) and return every measurement plus medians; compiles are kept under ``out``.
    ``lerobot_cfg``: how LeRobot reads the source (None: not read)."""
    out.mkdir(parents=True, exist_ok=True)
    compiles: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for r in range(compile_repeats):
        for name, s in variants.items():
            dest = out / f"compiled-{name}"
            shutil.rmtree(dest, ignore_errors=True)
            t0 = time.perf_counter()
            report = compile_dataset(source, str(dest), settings=s, workers=workers, progress=False)
            secs = time.perf_counter() - t0
            compiles[name].append({"seconds": secs, "bytes": _dir_bytes(dest), "shard_bytes": report.bytes,
                                   "psnr_mean": report.psnr_mean, "psnr_min": report.psnr_min,
                                   "reasons": dict(report.reencode_reasons)})
            echo(f"compile {name} #{r}: {secs:.1f}s, {_dir_bytes(dest) / 1e6:.1f} MB, "
                 f"PSNR mean {report.psnr_mean or 0:.2f} / min {report.psnr_min or 0:.2f} dB")
    runs: list[dict[str, Any]] = []
    for r in range(repeats):
        for name in variants:
            res = run_external(sys.executable, "loader", "single", compiled=str(out / f"compiled-{name}"),
                               source=source, cfg=cfg, repeat=r)
            res["variant"] = f"loader {name}"
            runs.append(res)
            echo(f"  loader {name:>9} #{r}: {res['samples_per_s']:8.1f} samples/s")
        if lerobot_python and lerobot_cfg is not None:
            res = run_external(lerobot_python, "lerobot", "single", compiled="", source=source, cfg=lerobot_cfg,
                               repeat=r)
            res["variant"] = lerobot_name
            runs.append(res)
            echo(f"  {res['variant']} #{r}: {res['samples_per_s']:8.1f} samples/s")
    names = list(dict.fromkeys(x["variant"] for x in runs))
    med = {v: statistics.median(x["samples_per_s"] for x in runs if x["variant"] == v) for v in names}
    order = {v: _order([x for x in runs if x["variant"] == v]) for v in names}
    comp = {name: {"seconds": statistics.median(c["seconds"] for c in cs),
                   "bytes": statistics.median(c["bytes"] for c in cs),
                   "psnr_mean": cs[0]["psnr_mean"], "psnr_min": min(c["psnr_min"] or 0 for c in cs)}
            for name, cs in compiles.items()}
    return {"source": source, "config": asdict(cfg), "repeats": repeats, "workers": workers,
            "compile": comp, "compile_runs": compiles, "samples_per_s": med, "order": order, "runs": runs}


def _order(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Medians of a variant's order figures over its rounds (None where a run has none)."""
    return {k: statistics.median(vs) if (vs := [r[k] for r in runs if r.get(k) is not None]) else None
            for k in ORDER_FIELDS}


def resize_benchmark(source: str, *, size: tuple[int, int], out: Path, cfg: RunConfig, repeats: int = 3,
                     compile_repeats: int = 1, workers: int = 2, settings: CompileSettings | None = None,
                     lerobot_python: str | None = None, echo: Any = print) -> dict[str, Any]:
    """Full size vs ``--resize HxW`` (module doc), uint8."""
    settings = settings or CompileSettings()
    ucfg = replace(cfg, return_uint8=True)
    result = variants_benchmark(
        source, {"full": settings, f"{size[0]}x{size[1]}": settings.replace(resize=size)}, out=out, cfg=ucfg,
        lerobot_cfg=replace(ucfg, resize=size), lerobot_name=f"lerobot + Resize({size[0]}x{size[1]})",
        repeats=repeats, compile_repeats=compile_repeats, workers=workers, lerobot_python=lerobot_python, echo=echo)
    return {**result, "size": list(size)}


def images_benchmark(source: str, *, out: Path, cfg: RunConfig, repeats: int = 3, compile_repeats: int = 1,
                     workers: int = 2, settings: CompileSettings | None = None, lerobot_python: str | None = None,
                     echo: Any = print) -> dict[str, Any]:
    """Image features kept vs compiled as clips (module doc)."""
    settings = settings or CompileSettings()
    return variants_benchmark(
        source, {"keep": settings.replace(images="keep"), "clips": settings.replace(images="clips")}, out=out,
        cfg=cfg, lerobot_cfg=cfg, repeats=repeats, compile_repeats=compile_repeats, workers=workers,
        lerobot_python=lerobot_python, echo=echo)


def markdown(result: dict[str, Any]) -> str:
    """Two tables: compile time and size; read samples/s with ratios to the first variant's loader and to
    LeRobot."""
    comp = result["compile"]
    lines = ["| compile | seconds | output MB | PSNR mean / min dB |", "|---|---|---|---|"]
    for name, c in comp.items():
        lines.append(f"| {name} | {c['seconds']:.1f} | {c['bytes'] / 1e6:.1f} | "
                     f"{c['psnr_mean'] or 0:.2f} / {c['psnr_min']:.2f} |")
    sps = result["samples_per_s"]
    first = next(iter(sps.values()))
    base = next(iter(sps))
    lerobot = next((v for k, v in sps.items() if k.startswith("lerobot")), None)
    lines += ["", f"| reader | samples/s | x {base} | x LeRobot | episodes/batch (uniform) | near-dup pairs/batch "
              "(uniform) |", "|---|---|---|---|---|---|"]
    for name, v in sps.items():
        o = result.get("order", {}).get(name, {})
        lines.append(f"| {name} | {v:.0f} | {v / first:.2f} | " + (f"{v / lerobot:.1f} | " if lerobot else "- | ")
                     + f"{order_cell(o, 'distinct_episodes_per_batch')} | {order_cell(o, 'near_duplicate_pairs_per_batch')} |")
    return "\n".join(lines)
