"""Scale benchmark: start-up and memory of the reader against the number of episodes in the index.

No video is needed to measure start-up, so each size is a real small compiled dataset (its shards, data and
meta kept) whose index is padded with synthetic episodes in shards that do not exist. The real shards come first,
so a reader with ``shuffle=False`` reads real records for its first batch. Every size is measured in a fresh
process (``python -m roboreel.bench.scale ROOT``): construct time, pickled size, ``len()``, index memory after the
plan of one consumer, and the first batch through a DataLoader with workers. Not a timed test:
``roboreel bench scale``.
"""

from __future__ import annotations

import binascii
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.formats import index as ix
from roboreel.formats import manifest as mf
from roboreel.formats import shard as sh
from roboreel.formats.index_write import file_digest


@dataclass(frozen=True)
class ScaleConfig:
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    episode_length: int = 300  # frames of each padding episode (10 s at 30 fps)
    episodes_per_shard: int = 100
    batch_size: int = 16
    num_workers: int = 2


def _padding_table(first: int, count: int, first_shard: int, per_shard: int, length: int, cameras: list[str],
                   frames_before: int, rng: np.random.Generator) -> pa.Table:
    """``count`` synthetic episode rows, built column-wise (a million rows in seconds)."""
    idx = np.arange(first, first + count, dtype=np.int64)
    names = [".json", ".parquet", *(f".{c}.mp4" for c in cameras)]
    k = len(names)
    keys = np.char.zfill(idx.astype(str), 6)
    member_names = np.repeat(keys, k).astype(object) + np.tile(np.array(names, dtype=object), count)
    sizes = rng.integers(2_000, 400_000, size=count * k, dtype=np.int64)
    raw = rng.bytes(32 * count * k)
    shas = [binascii.hexlify(raw[i:i + 32]).decode() for i in range(0, len(raw), 32)]
    members = pa.ListArray.from_arrays(
        pa.array(np.arange(0, (count + 1) * k, k, dtype=np.int32)),
        pa.StructArray.from_arrays([pa.array(member_names, pa.string()), pa.array(sizes), pa.array(shas, pa.string())],
                                   fields=list(ix.EPISODES_SCHEMA.field("members").type.value_type)))
    start = frames_before + (idx - first) * length
    return pa.table({
        "index": idx, "length": np.full(count, length, dtype=np.int64), "from_index": start,
        "to_index": start + length, "shard": first_shard + np.arange(count) // per_shard,
        "tasks": pa.array([["pad"]] * count, ix.EPISODES_SCHEMA.field("tasks").type),
        "rows_sha256": pa.array(["v2:" + "0" * 64] * count, pa.string()), "members": members,
    }, schema=ix.EPISODES_SCHEMA)


def build_padded(real: Path, out: Path, episodes: int, cfg: ScaleConfig) -> Path:
    """``real`` (a compiled dataset) with its index padded to ``episodes`` episodes, at ``out``."""
    if (out / mf.MANIFEST_NAME).exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for d in (sh.SHARD_DIR, "data", "meta"):
        if (real / d).exists():
            os.symlink((real / d).resolve(), tmp / d)
    m = mf.load_manifest(str(real))
    real_entries, real_shards = m.episodes, m.shards
    pad = max(0, episodes - len(real_entries))
    rng = np.random.default_rng(0)
    first_ep = max(e.index for e in real_entries) + 1
    per = cfg.episodes_per_shard
    n_pad_shards = -(-pad // per)
    # the episode files, a row group at a time
    tables = [ix.entries_table(real_entries)]
    made = 0
    chunk = 100_000
    while made < pad:
        n = min(chunk, pad - made)
        tables.append(_padding_table(first_ep + made, n, len(real_shards) + made // per, per,
                                     cfg.episode_length, m.camera_keys, m.total_frames + made * cfg.episode_length,
                                     rng))
        made += n
    table = pa.concat_tables(tables)
    files = []
    for f, lo in enumerate(range(0, table.num_rows, ix.ROWS_PER_FILE)):
        rel = ix.episodes_file(f)
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        part = table.slice(lo, ix.ROWS_PER_FILE)
        pq.write_table(part, tmp / rel, row_group_size=ix.ROW_GROUP_ROWS, compression="zstd")
        files.append({"path": rel, "rows": part.num_rows, **file_digest(str(tmp / rel))})
    counts = [len(s.episodes) for s in real_shards] + [min(per, pad - i * per) for i in range(n_pad_shards)]
    frames = [sum(e.length for e in real_entries if e.shard == i) for i in range(len(real_shards))]
    frames += [c * cfg.episode_length for c in counts[len(real_shards):]]
    shard_table = pa.table({
        "path": [s.path for s in real_shards] + [f"shards/pad-{i:06d}.tar" for i in range(n_pad_shards)],
        "size": [s.size for s in real_shards] + [c * 1_000_000 for c in counts[len(real_shards):]],
        "sha256": [s.sha256 for s in real_shards] + ["0" * 64] * n_pad_shards,
        "first": np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64), "episodes": counts, "frames": frames,
    }, schema=ix.SHARDS_SCHEMA)
    pq.write_table(shard_table, tmp / ix.SHARDS_PATH, compression="zstd")
    descriptor = {"shards": {"path": ix.SHARDS_PATH, "rows": shard_table.num_rows,
                             **file_digest(str(tmp / ix.SHARDS_PATH))},
                  "episodes": files, "episodes_total": table.num_rows, "frames_total": int(sum(frames)),
                  "row_group_rows": ix.ROW_GROUP_ROWS}
    doc = json.loads((real / mf.MANIFEST_NAME).read_text())
    doc["index"] = descriptor
    (tmp / mf.MANIFEST_NAME).write_text(json.dumps(doc, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def measure(root: str, batch_size: int, num_workers: int) -> dict[str, Any]:
    """Start-up of one process over ``root`` (run it in a fresh interpreter)."""
    import pickle

    import torch

    from roboreel.reader import CompiledDataset
    from roboreel.reader.plan import PoolSchedule, ScheduleKey, World, consumer_slices, stream_arrays

    rss0 = _rss_mb()
    t0 = time.perf_counter()
    ds = CompiledDataset(root, shuffle=False, batch_size=batch_size)
    construct_s = time.perf_counter() - t0
    pickled = len(pickle.dumps(ds))
    t0 = time.perf_counter()
    n = len(ds)
    len_s = time.perf_counter() - t0
    rss_dataset = _rss_mb()
    t0 = time.perf_counter()
    # what one DataLoader worker holds for its epoch: its slices, its stream arrays and schedule, the detail of
    # the first shard it streams
    slices = consumer_slices(ds.manifest, World(0, 1, 0, num_workers), seed=0, epoch=0, shuffle=True,
                             sel=ds.selection)
    order, sizes, starts, stops = stream_arrays(slices, ds.manifest.lengths)
    schedule = PoolSchedule(order, sizes, ranges=np.stack([starts, stops], axis=1), pool_size=32, shuffle=True,
                            key=ScheduleKey(0, 0))
    ds.manifest.index.shard_entries(slices[0].shard)
    plan_s = time.perf_counter() - t0
    rss_index = _rss_mb()
    t0 = time.perf_counter()
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=num_workers)
    it = iter(loader)
    next(it)
    first_batch_s = time.perf_counter() - t0
    del it, schedule
    return {"samples": n, "construct_s": construct_s, "pickled_bytes": pickled, "len_s": len_s,
            "plan_s": plan_s, "first_batch_s": first_batch_s, "rss_start_mb": rss0,
            "index_mb": rss_index - rss0, "dataset_mb": rss_dataset - rss0, "rss_mb": _rss_mb()}


def measure_validate(root: str) -> dict[str, Any]:
    """validate's index checks (files' sha256, every shard's episode rows) over ``root``: time and peak RSS
    (sampled every 10 ms: ``ru_maxrss`` would carry the parent's RSS from before the fork)."""
    import threading

    from roboreel.validate._io import Root
    from roboreel.validate.compiled import load
    from roboreel.validate.index import check_index_files, check_manifest
    from roboreel.validate.report import Report

    rss0 = _rss_mb()
    peak, done = [rss0], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], _rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    report, r = Report(root), Root.open_url(root)
    m = load(r, report)
    ok = m is not None and check_index_files(r, m, report, fast=False)
    if ok:
        check_manifest(m, report, world_size=1, num_workers=1)
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    return {"validate_index_s": seconds, "validate_peak_rss_mb": max(peak[0], _rss_mb()),
            "validate_rss_start_mb": rss0, "validate_findings": len(report.findings)}


def run_scale(workdir: Path, real: Path, cfg: ScaleConfig, out: Path) -> list[dict[str, Any]]:
    """Build each padded index under ``workdir`` and measure it in a fresh process; write scale.json/.csv/.png."""
    rows = []
    for n in cfg.sizes:
        t0 = time.perf_counter()
        root = build_padded(real, workdir / f"padded-{n}", n, cfg)
        built_s = time.perf_counter() - t0
        proc = subprocess.run([sys.executable, "-m", "roboreel.bench.scale", str(root), str(cfg.batch_size),
                               str(cfg.num_workers)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"scale measurement failed for {n} episodes:\n{proc.stderr[-3000:]}")
        m = json.loads(proc.stdout.strip().splitlines()[-1])
        proc = subprocess.run([sys.executable, "-m", "roboreel.bench.scale", "--validate", str(root)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"validate measurement failed for {n} episodes:\n{proc.stderr[-3000:]}")
        m.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        index_bytes = sum(f.stat().st_size for f in (root / ix.INDEX_DIR).rglob("*.parquet"))
        rows.append({"episodes": n, "index_mb": index_bytes / 2**20,
                     "manifest_kb": (root / mf.MANIFEST_NAME).stat().st_size / 1024, "build_s": built_s,
                     **{k if k != "index_mb" else "index_rss_mb": v for k, v in m.items()}})
        print(_row_text(rows[-1]), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps({"config": asdict(cfg), "rows": rows}, indent=1))
    keys = list(rows[0])
    (out / "scale.csv").write_text("\n".join([",".join(keys)] + [",".join(str(r[k]) for k in keys) for r in rows]) + "\n")
    chart(rows, out / "scale.png")
    return rows


def _row_text(r: dict[str, Any]) -> str:
    return (f"{r['episodes']:>9,} episodes: construct {r['construct_s']:.3f}s, pickled {r['pickled_bytes'] / 1024:.0f} KB, "
            f"index RSS {r['index_rss_mb']:.0f} MB, first batch {r['first_batch_s']:.2f}s, "
            f"validate index {r['validate_index_s']:.1f}s (peak RSS {r['validate_peak_rss_mb']:.0f} MB)")


def markdown(rows: list[dict[str, Any]], *, num_workers: int = ScaleConfig.num_workers) -> str:
    workers = f"{num_workers} worker{'s' if num_workers != 1 else ''}"
    lines = ["| episodes | index files | roboreel.json | `CompiledDataset(...)` | pickled | `len()` | plan + first "
             f"shard's entries | index memory (RSS) | first batch ({workers}) | validate index (peak RSS) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['episodes']:,} | {r['index_mb']:.1f} MB | {r['manifest_kb']:.0f} KB | "
                     f"{r['construct_s']:.3f} s | {r['pickled_bytes'] / 1024:.0f} KB | {r['len_s'] * 1000:.1f} ms | "
                     f"{r['plan_s']:.3f} s | {r['index_rss_mb']:.0f} MB | {r['first_batch_s']:.2f} s | "
                     f"{r['validate_index_s']:.1f} s ({r['validate_peak_rss_mb']:.0f} MB) |")
    return "\n".join(lines)


def chart(rows: list[dict[str, Any]], path: Path, *, title: str | None = None) -> None:
    """Three panels against the episode count: opening the dataset, the first batch, the index's memory (rows:
    ``run_scale``'s, or docs/benchmarks.md's table as benchmarks/plot_doc_charts.py gives them)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plotting is optional
        return
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    x = [r["episodes"] for r in rows]
    for a, key, label in ((ax[0], "construct_s", "CompiledDataset(...) [s]"), (ax[1], "first_batch_s", "first batch [s]"),
                          (ax[2], "index_rss_mb", "index memory per process [MB]")):
        a.plot(x, [r[key] for r in rows], "o-")
        a.set_xscale("log")
        a.set_ylim(bottom=0)
        a.set_xlabel("episodes in the index")
        a.set_title(label, fontsize=10)
        a.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if sys.argv[1] == "--validate":
        print(json.dumps(measure_validate(sys.argv[2])))
    else:
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
