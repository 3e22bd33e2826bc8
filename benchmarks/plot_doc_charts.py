"""Draw the charts of docs/benchmarks.md from the numbers in its tables (no measurement here).

The numbers are copied from the tables they illustrate, so a chart can be redrawn, or changed with its table, with
roboreel and matplotlib (``pip install '.[plot]'`` from a clone):

    python benchmarks/plot_doc_charts.py docs/img
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from roboreel.bench.scale import chart  # noqa: E402

HOST = "2-core x86_64 host, no GPU"

# docs/benchmarks.md, "Across data shapes": samples/s, medians (first-epoch window, 2026-11-25)
READERS = ("roboreel.loader", "DataLoader(CompiledDataset)", "LeRobotDataset")
SHAPES: list[tuple[str, tuple[float, float, float]]] = [
    ("ALOHA 480x640, 1 cam\nuint8, batch 16", (1356, 581, 410)),
    ("ALOHA 480x640, 1 cam\nfloat32, batch 16", (601, 195, 170)),
    ("synthetic 480x640, 1 cam\nuint8, batch 16", (923, 457, 274)),
    ("synthetic 224x224, 3 cams\nuint8, batch 32", (1105, 804, 232)),
    ("synthetic 224x224, 3 cams\nfloat32, batch 32", (824, 390, 204)),
]

# docs/benchmarks.md, "Training reads" and "Compile at the training resolution" (2026-12-06): roboreel.loader as the
# README calls it, at its default order, / LeRobotDataset, ratio of medians
SPEEDUPS: list[tuple[str, float]] = [
    ("ALOHA fleet 480x640, 1 camera", 2.9),
    ("ALOHA fleet 480x640, 4 cameras", 4.0),
    ("ALOHA fleet 224x224, 3 cameras", 4.0),
    ("ALOHA 480x640, 1 camera, 8 episodes", 2.7),
    ("ALOHA fleet 480x640 compiled --resize 224x224\nvs LeRobotDataset + Resize", 7.6),
]

# docs/benchmarks.md, "Scale: start-up and memory against the episode count" (2026-11-23): episodes,
# CompiledDataset(...) s, first batch s, index memory MB
SCALE: list[tuple[int, float, float, float]] = [
    (1_000, 0.011, 0.10, 42),
    (10_000, 0.012, 0.14, 42),
    (100_000, 0.011, 0.12, 42),
    (1_000_000, 0.014, 0.16, 88),
]


def readers_chart(path: Path) -> None:
    """Grouped bars: the three readers on each data shape."""
    fig, ax = plt.subplots(figsize=(10, 4.6))
    width = 0.26
    colors = ("#1f77b4", "#9ecae1", "#d62728")
    for r, (name, color) in enumerate(zip(READERS, colors, strict=True)):
        xs = [i + (r - 1) * width for i in range(len(SHAPES))]
        vals = [v[r] for _, v in SHAPES]
        bars = ax.bar(xs, vals, width, label=name, color=color)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in vals], fontsize=7, padding=2)
    ax.set_xticks(range(len(SHAPES)), [s for s, _ in SHAPES], fontsize=8)
    ax.set_ylabel("samples/s (median)")
    ax.set_title(f"Readers on each data shape: 2 DataLoader workers, first epoch ({HOST}, 2026-11-25)", fontsize=10)
    ax.legend(fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def speedup_chart(path: Path) -> None:
    """Horizontal bars: roboreel's samples/s over LeRobotDataset's, per measured comparison."""
    fig, ax = plt.subplots(figsize=(10, 4.2))
    labels = [s for s, _ in SPEEDUPS][::-1]
    vals = [v for _, v in SPEEDUPS][::-1]
    bars = ax.barh(labels, vals, color="#1f77b4")
    ax.bar_label(bars, labels=[f"{v:.1f}x" for v in vals], fontsize=8, padding=3)
    ax.axvline(1.0, color="#d62728", lw=1, ls="--", label="LeRobotDataset = 1x")
    ax.set_xlabel("samples/s, x LeRobotDataset 0.6.1 (ratio of medians)")
    ax.set_title(f"roboreel.loader vs LeRobotDataset 0.6.1: uint8, batch 32, 2 workers, batches of independent "
                 f"frames\n({HOST}, 2026-12-06)", fontsize=9)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlim(0, max(vals) * 1.12)
    ax.legend(fontsize=8, loc="center right")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def scale_chart(path: Path) -> None:
    """bench scale's own chart (roboreel/bench/scale.py), drawn from the table's numbers."""
    rows = [{"episodes": e, "construct_s": c, "first_batch_s": f, "index_rss_mb": m} for e, c, f, m in SCALE]
    chart(rows, path, title=f"Start-up and memory against the episode count ({HOST}, 2026-11-23)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="folder for the PNGs (docs/img)")
    out = p.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    readers_chart(out / "readers-by-shape.png")
    speedup_chart(out / "speedup-vs-lerobot.png")
    scale_chart(out / "bench-scale.png")


if __name__ == "__main__":
    main()
