"""Stats of what a transforming compile writes (``--fps``, ``--resize``), computed as LeRobot 0.6.1 computes them.

A port of ``lerobot.datasets.compute_stats`` (Apache-2.0; lerobot 0.6.1: ``RunningQuantileStats``,
``get_feature_stats``, ``compute_episode_stats``, ``aggregate_stats``), so roboreel needs no LeRobot to write
them: per episode, every non-string feature gets min / max / mean / std / count and the q01..q99 quantiles
(histogram-estimated, 5000 bins); camera features are computed per channel over ``stats_sample_indices(length)`` frames
subsampled to about 150 px (``auto_downsample_height_width``) and divided by 255 (depth maps are not); the
dataset's stats.json aggregates the episodes' stats weighted by count (quantiles by a count-weighted mean), one
episode at a time as LeRobot's recorder does (``dataset_stats``). Tabular stats come from the kept rows, camera
stats from the frames handed to the encoder (the resized source frames, as LeRobot's recorder computes them from
the frames it writes, before encoding).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from roboreel.formats.columns import numeric_array

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
_QKEYS = [f"q{int(q * 100):02d}" for q in QUANTILES]
_BINS = 5000


def estimate_num_samples(n: int, min_num: int = 100, max_num: int = 10_000, power: float = 0.75) -> int:
    if n < min_num:
        min_num = n
    return max(min_num, min(int(n**power), max_num))


def stats_sample_indices(n: int) -> list[int]:
    """The frames of an n-frame episode LeRobot samples for image stats."""
    return np.round(np.linspace(0, n - 1, estimate_num_samples(n))).astype(int).tolist()


def downsample(img: np.ndarray, target: int = 150, threshold: int = 300) -> np.ndarray:
    """LeRobot's ``auto_downsample_height_width`` of a CHW image: every f-th pixel, f = longest side // 150."""
    _, h, w = img.shape
    if max(w, h) < threshold:
        return img
    f = int(w / target) if w > h else int(h / target)
    return img[:, ::f, ::f]


class _Running:
    """LeRobot's ``RunningQuantileStats``, fed one batch (all LeRobot feeds per episode)."""

    def __init__(self, batch: np.ndarray) -> None:
        batch = batch.reshape(-1, batch.shape[-1])
        batch = batch.astype(np.result_type(batch.dtype, np.float32), copy=False)
        self.count = batch.shape[0]
        self.mean = np.mean(batch, axis=0)
        self.mean_sq = np.mean(batch**2, axis=0)
        self.min, self.max = np.min(batch, axis=0), np.max(batch, axis=0)
        self.hist, self.edges = [], []
        for i in range(batch.shape[1]):
            edges = np.linspace(self.min[i] - 1e-10, self.max[i] + 1e-10, _BINS + 1)
            self.edges.append(edges)
            self.hist.append(np.histogram(batch[:, i], bins=edges)[0].astype(np.float64))

    def stats(self) -> dict[str, np.ndarray]:
        std = np.sqrt(np.maximum(0, self.mean_sq - self.mean**2))
        out = {"min": self.min.copy(), "max": self.max.copy(), "mean": self.mean.copy(), "std": std,
               "count": np.array([self.count])}
        for key, q in zip(_QKEYS, QUANTILES, strict=True):
            out[key] = np.array([_quantile(h, e, q * self.count) for h, e in zip(self.hist, self.edges, strict=True)])
        return out


def _quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> float:
    cumsum = np.cumsum(hist)
    idx = np.searchsorted(cumsum, target)
    if idx == 0:
        return edges[0]
    if idx >= len(cumsum):
        return edges[-1]
    before = cumsum[idx - 1]
    inside = cumsum[idx] - before
    if inside == 0:
        return edges[idx]
    return edges[idx] + (target - before) / inside * (edges[idx + 1] - edges[idx])


def vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """A tabular feature's episode stats (LeRobot: axis 0, keepdims for 1-d columns)."""
    flat = values.reshape(-1, 1) if values.ndim == 1 else values
    if flat.shape[0] < 2:
        out = {"min": np.min(flat, axis=0), "max": np.max(flat, axis=0), "mean": np.mean(flat, axis=0),
               "std": np.std(flat, axis=0), "count": np.array([values.shape[0]])}
        out.update({k: out["mean"].copy() for k in _QKEYS})
    else:
        out = _Running(flat).stats()
        out["count"] = np.array([values.shape[0]])
    if values.ndim == 1:
        out = {k: v if k == "count" else v.reshape(1) for k, v in out.items()}
    return out


def image_stats(frames: np.ndarray, *, depth: bool = False) -> dict[str, np.ndarray]:
    """A camera's episode stats from its sampled, downsampled frames [N, C, h, w] (uint8): per channel, (C, 1, 1),
    in [0, 1] unless a depth map."""
    n, c = frames.shape[:2]
    flat = frames.transpose(0, 2, 3, 1).reshape(-1, c)
    out = _Running(flat).stats() if flat.shape[0] >= 2 else None
    if out is None:
        raise ValueError("image stats need at least 2 pixels")
    out["count"] = np.array([n])
    scale = 1.0 if depth else 255.0
    return {k: v if k == "count" else v.reshape(c, 1, 1) / scale for k, v in out.items()}


def aggregate(stats: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """LeRobot's ``aggregate_feature_stats``: episodes' stats of one feature -> the dataset's."""
    means = np.stack([s["mean"] for s in stats])
    variances = np.stack([s["std"] ** 2 for s in stats])
    counts = np.stack([s["count"] for s in stats])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    var = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out = {"min": np.min(np.stack([s["min"] for s in stats]), axis=0),
           "max": np.max(np.stack([s["max"] for s in stats]), axis=0),
           "mean": mean, "std": np.sqrt(var), "count": total}
    for key in _QKEYS:
        if all(key in s for s in stats):
            out[key] = (np.stack([s[key] for s in stats]) * counts).sum(axis=0) / total
    return out


def rows_stats(rows: Any, features: dict[str, dict[str, Any]],
               fps: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Episode stats of every tabular (non-string, non-camera) feature present in ``rows`` (a pyarrow table),
    from the values LeRobot's recorder held: each feature in its stored dtype and shape (formats/columns.py), and
    ``timestamp`` as the float64 ``frame_index / fps`` its recorder computes (``add_frame``) when the stored
    float32 timestamps are those (``fps`` given), not their float32 rounding."""
    out = {}
    for key, ft in features.items():
        if ft.get("dtype") in ("string", "language", "image", "video") or key not in rows.column_names:
            continue
        values = numeric_array(rows.column(key))
        if values is None:
            raise ValueError(f"feature {key!r} is {rows.column(key).type}: not numbers of one shape, no stats")
        if key == "timestamp" and fps and "frame_index" in rows.column_names:
            recorded = rows.column("frame_index").to_numpy() / fps
            if np.array_equal(recorded.astype(values.dtype), values):
                values = recorded
        out[key] = vector_stats(values)
    return out


def stats_to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, list]]:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def stats_from_json(stats: dict[str, dict[str, list]]) -> dict[str, dict[str, np.ndarray]]:
    return {k: {s: np.asarray(v) for s, v in d.items()} for k, d in stats.items()}


def stats_dtype(feature: dict[str, Any], stat: str, key: str | None = None) -> type:
    """The dtype LeRobot's episode stat of a feature has in memory (what ``aggregate_stats`` then computes in):
    quantiles float64 (interpolated on float64 bin edges); min/max/mean/std in the dtype its recorder's values
    were promoted to (``np.result_type(dtype, float32)``: float32 for float32, float16, bool and integers up to 16
    bits, and for cameras, uint8 divided by 255; float64 for float64 and wider integers), ``timestamp`` float64 (a
    Python float per frame, rows_stats); count int64. json keeps the values exactly; this restores the dtype so
    aggregation rounds alike."""
    if stat == "count":
        return np.int64
    if stat in _QKEYS or key == "timestamp":
        return np.float64
    dtype = feature.get("dtype")
    if dtype in ("video", "image"):
        return np.float32
    try:
        return np.result_type(np.dtype(dtype), np.float32).type
    except TypeError:
        return np.float64


def dataset_stats(episodes: dict[int, dict[str, dict[str, list]]],
                  features: dict[str, dict[str, Any]]) -> dict[str, dict[str, list]]:
    """stats.json from the episodes' stats (json form, by episode index) as LeRobot's recorder makes it: episode
    by episode, in episode order, each saved episode folded into the stats so far (``save_episode``:
    ``aggregate_stats([stats, episode_stats])``; the first episode's stats as they are). Aggregating all the
    episodes at once rounds differently in the last bits."""
    per_feature: dict[str, dict[str, np.ndarray]] = {}
    for ep in sorted(episodes):
        for key, st in stats_from_json(episodes[ep]).items():
            st = {k: v.astype(stats_dtype(features.get(key, {}), k, key)) for k, v in st.items()}
            per_feature[key] = aggregate([per_feature[key], st]) if key in per_feature else st
    return stats_to_json(dict(sorted(per_feature.items())))


def episode_columns(order: list[int], episodes: dict[int, dict[str, dict[str, list]]]) -> dict[str, list]:
    """The meta/episodes ``stats/<feature>/<stat>`` columns (LeRobot's flattened layout), rows in ``order``."""
    names = sorted({f"stats/{key}/{s}" for st in episodes.values() for key, d in st.items() for s in d})
    cols: dict[str, list] = {}
    for name in names:
        _, key, stat = name.split("/", 1)[0], *name[len("stats/"):].rsplit("/", 1)
        cols[name] = [episodes[ep].get(key, {}).get(stat) for ep in order]
    return cols
