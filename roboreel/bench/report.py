"""Benchmark output: one JSON + CSV row per run, a summary table (medians and ratios), and a PNG chart."""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

_CSV_FIELDS = (
    "reader", "mode", "repeat", "where", "samples", "samples_per_s", "ceiling_fraction", "ceiling_frames_per_s",
    "ceiling_drift", "first_batch_s",
    "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "peak_rss_mb", "decode_s", "fetch_s",
    "decoder_opens", "decoder_reuses", "distinct_episodes_per_batch", "uniform_distinct_episodes_per_batch",
    "near_duplicate_pairs_per_batch", "uniform_near_duplicate_pairs_per_batch", "cpu_ms_per_sample", "batch_size", "num_workers",
    "persistent_workers", "steady_epochs", "epoch_start_s",
    "decode_device", "decode_stage", "fallback_clips", "gpu_max_allocated_mb", "gpu_max_reserved_mb",
)


# Sample order (reader/order.py): each reader's figure and uniform sampling's over the same episodes
ORDER_FIELDS = ("distinct_episodes_per_batch", "uniform_distinct_episodes_per_batch",
                "near_duplicate_pairs_per_batch", "uniform_near_duplicate_pairs_per_batch")


def write_runs(out: Path, runs: list[dict[str, Any]]) -> None:
    """runs.json (everything) and runs.csv (the headline fields)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=_CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in runs:
            w.writerow({k: r.get(k) for k in _CSV_FIELDS})


def summarize(runs: list[dict[str, Any]], *, baseline: str = "reference") -> list[dict[str, Any]]:
    """Median per (where, mode, reader) over repeats, and the ratio to the baseline reader's median."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r.get("where", "local"), r["mode"], r["reader"])].append(r)
    rows = []
    for (where, mode, reader), rs in sorted(groups.items()):
        def med(key: str, rs: list[dict[str, Any]] = rs) -> float | None:
            vals = [r[key] for r in rs if r.get(key) is not None]
            return statistics.median(vals) if vals else None

        rows.append({
            "where": where, "mode": mode, "reader": reader, "repeats": len(rs),
            "samples_per_s": med("samples_per_s"), "ceiling_fraction": med("ceiling_fraction"),
            "first_batch_s": med("first_batch_s"), "latency_p50_ms": med("latency_p50_ms"),
            "latency_p99_ms": med("latency_p99_ms"), "peak_rss_mb": med("peak_rss_mb"),
            **{k: med(k) for k in ORDER_FIELDS},
            "cpu_ms_per_sample": med("cpu_ms_per_sample"),
            "gpu_max_allocated_mb": med("gpu_max_allocated_mb"), "gpu_max_reserved_mb": med("gpu_max_reserved_mb"),
        })
    for name in dict.fromkeys([baseline, "lerobot"]):  # LeRobotDataset: what users have, so every speed-up is also stated against it
        for row in rows:
            base = next((b for b in rows if b["where"] == row["where"] and b["mode"] == row["mode"]
                         and b["reader"] == name), None)
            row[f"x_{name}"] = (
                row["samples_per_s"] / base["samples_per_s"]
                if base and base["samples_per_s"] and row["samples_per_s"] is not None else None
            )
    return rows


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def order_cell(row: dict[str, Any], key: str) -> str:
    """An order figure with uniform sampling's beside it: "11.3 (17.9)"."""
    uniform = row.get("uniform_" + key)
    return _fmt(row.get(key), ".1f") + ("" if uniform is None else f" ({uniform:.1f})")


def markdown_table(rows: list[dict[str, Any]], *, baseline: str = "reference") -> str:
    """The summary as a Markdown table (what docs/benchmarks.md and the CLI print)."""
    lerobot = baseline != "lerobot" and any(r.get("x_lerobot") is not None for r in rows)
    head = ("| where | mode | reader | samples/s | of ceiling | x " + baseline + (" | x lerobot" if lerobot else "") +
            " | first batch s | p50 ms | p99 ms | peak RSS MB | episodes/batch (uniform) | near-dup pairs/batch (uniform) "
            "| CPU ms/sample |")
    gpu = any(r.get("gpu_max_allocated_mb") is not None for r in rows)  # a --decode-device cuda run
    if gpu:
        head += " GPU max alloc MB | GPU max reserved MB |"
    lines = [head, "|" + "|".join(["---"] * (13 + lerobot + 2 * gpu)) + "|"]
    for r in rows:
        lines.append(
            f"| {r['where']} | {r['mode']} | {r['reader']} | {_fmt(r['samples_per_s'], '.0f')} | "
            f"{_fmt(r['ceiling_fraction'], '.0%')} | {_fmt(r.get('x_' + baseline), '.1f')} | "
            + (f"{_fmt(r.get('x_lerobot'), '.1f')} | " if lerobot else "") +
            f"{_fmt(r['first_batch_s'], '.2f')} | {_fmt(r['latency_p50_ms'], '.1f')} | "
            f"{_fmt(r['latency_p99_ms'], '.1f')} | {_fmt(r['peak_rss_mb'], '.0f')} | "
            f"{order_cell(r, 'distinct_episodes_per_batch')} | {order_cell(r, 'near_duplicate_pairs_per_batch')} | "
            f"{_fmt(r.get('cpu_ms_per_sample'), '.2f')} |"
            + (f" {_fmt(r.get('gpu_max_allocated_mb'), '.0f')} | {_fmt(r.get('gpu_max_reserved_mb'), '.0f')} |"
               if gpu else "")
        )
    return "\n".join(lines)


def chart(rows: list[dict[str, Any]], path: Path, *, ceiling_samples_per_s: float | None,
          transport_samples_per_s: float | None = None, title: str | None = None) -> Path | None:
    """Bar chart of median samples/s per reader and mode (one panel per where); the decode ceiling (dashed) and
    the transport bound (dotted) drawn on the local panel. ``title`` names the data (suite.data_label): a chart
    passed around without its run directory still says what it measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    wheres = sorted({r["where"] for r in rows})
    fig, axes = plt.subplots(1, len(wheres), figsize=(6 * len(wheres), 4), squeeze=False)
    for ax, where in zip(axes[0], wheres, strict=True):
        sub = [r for r in rows if r["where"] == where]
        modes = sorted({r["mode"] for r in sub})
        readers = sorted({r["reader"] for r in sub})
        width = 0.8 / max(1, len(readers))
        for i, reader in enumerate(readers):
            vals = [next((r["samples_per_s"] or 0 for r in sub if r["mode"] == m and r["reader"] == reader), 0)
                    for m in modes]
            xs = [j + i * width for j in range(len(modes))]
            bars = ax.bar(xs, vals, width, label=reader)
            ax.bar_label(bars, fmt="%.0f", fontsize=8)
        ax.set_xticks([j + width * (len(readers) - 1) / 2 for j in range(len(modes))], modes)
        if ceiling_samples_per_s and where == "local":
            ax.axhline(ceiling_samples_per_s, ls="--", color="gray", label="CPU decode ceiling")
        if transport_samples_per_s and where == "local":
            ax.axhline(transport_samples_per_s, ls=":", color="black", label="transport bound (no decode)")
        ax.set_title(f"{where}: samples/s (median)")
        ax.set_ylabel("samples/s")
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9, wrap=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
