"""The synthetic dataset's statistics, computed as LeRobot computes them: per column over axis 0 with its
quantiles, per camera per channel in [0, 1], and a camera's dataset stats pooled from its episodes'."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def _stats(values: np.ndarray) -> dict[str, list]:
    """LeRobot-style stats over axis 0 (values [N, ...])."""
    v = values.astype(np.float64)
    out = {"min": v.min(0), "max": v.max(0), "mean": v.mean(0), "std": v.std(0)}
    for q in (1, 10, 50, 90, 99):
        out[f"q{q:02d}"] = np.quantile(v, q / 100, axis=0)
    res = {k: np.atleast_1d(x).tolist() for k, x in out.items()}
    res["count"] = [int(v.shape[0])]
    return res


def rgb_stats(frames: np.ndarray) -> dict[str, list]:
    """Per-channel stats of [N,H,W,3] uint8 frames in [0,1], shaped [3,1,1] like LeRobot's."""
    f = frames.astype(np.float32) / 255.0
    per = f.reshape(-1, 3)
    out = {"min": per.min(0), "max": per.max(0), "mean": per.mean(0), "std": per.std(0)}
    res = {k: x.reshape(3, 1, 1).tolist() for k, x in out.items()}
    res["count"] = [int(frames.shape[0])]
    return res


def column_stats(table: pa.Table, keys: tuple[str, ...]) -> dict[str, dict[str, list]]:
    """Stats of the numeric columns ``keys`` of ``table`` (vector columns per component)."""
    stats = {}
    for key in keys:
        col = table.column(key)
        vals = np.stack(col.to_numpy(zero_copy_only=False)) if pa.types.is_fixed_size_list(col.type) else col.to_numpy()
        stats[key] = _stats(vals.reshape(table.num_rows, -1))
    return stats


def _pooled_image_stats(per_ep: list[dict]) -> dict[str, list]:
    """A camera's dataset stats from its per-episode ones: mean and std pooled by frame count, as LeRobot."""
    n = np.array([s["count"][0] for s in per_ep], np.float64)
    mean = sum(np.array(s["mean"]) * c for s, c in zip(per_ep, n, strict=True)) / n.sum()
    return {
        "min": np.min([s["min"] for s in per_ep], axis=0).tolist(),
        "max": np.max([s["max"] for s in per_ep], axis=0).tolist(),
        "mean": mean.tolist(),
        "std": np.sqrt(sum(np.array(s["std"]) ** 2 * c for s, c in zip(per_ep, n, strict=True)) / n.sum()).tolist(),
        "count": [int(n.sum())],
    }


def dataset_stats(tables: list[pa.Table], camera_stats: dict[str, list[dict]]) -> dict:
    """meta/stats.json: every numeric column over all frames, then each camera's pooled stats."""
    keys = ("observation.state", "action", "timestamp", "frame_index", "episode_index", "index", "task_index")
    stats: dict = column_stats(pa.concat_tables(tables), keys)
    for key, per_ep in camera_stats.items():
        stats[key] = _pooled_image_stats(per_ep)
    return stats
