"""Merging several datasets' metadata into one mixture's: features, stats and tasks. Pure functions of the values.

- features: the keys every dataset has; a common key whose dtype or shape differs is an error naming both
  datasets (a camera's: pointing to ``roboreel compile --resize``), as is a different fps.
- stats: LeRobot 0.6.1's ``aggregate_stats`` (lerobot/datasets/compute_stats.py, ``aggregate_feature_stats``):
  min of mins, max of maxes, count-weighted mean, the pooled variance ``sum(count * (std^2 + (mean - mean_all)^2))
  / count_all``, quantiles (``q01``...) count-weighted where every dataset has them.
- tasks: the union of task strings (first dataset's order, then each new one), and per dataset the map from its
  ``task_index`` to the merged one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

_CAMERA_DTYPES = ("video", "image")


class MixtureMismatch(ValueError):
    """Datasets that cannot be mixed as they are (a feature's dtype or shape, or the fps, differs)."""


def _shape(feature: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in feature.get("shape") or ())


def common_features(names: Sequence[str], features: Sequence[Mapping[str, Mapping[str, Any]]],
                    fps: Sequence[int]) -> tuple[list[str], dict[str, list[str]]]:
    """(the keys every dataset has, in the first dataset's order; per dataset the keys it has beyond them).

    Raises ``MixtureMismatch`` naming both datasets when the fps or a common key's dtype or shape differs."""
    for name, f in zip(names[1:], fps[1:], strict=True):
        if int(f) != int(fps[0]):
            raise MixtureMismatch(f"{names[0]} runs at {fps[0]} fps but {name} at {f} fps: a mixture's samples "
                                  "share one fps (delta_timestamps are seconds); convert one dataset first")
    keys = [k for k in features[0] if all(k in f for f in features[1:])]
    for k in keys:
        a = features[0][k]
        for name, f in zip(names[1:], features[1:], strict=True):
            b = f[k]
            if a.get("dtype") != b.get("dtype") or _shape(a) != _shape(b):
                hint = ""
                if a.get("dtype") in _CAMERA_DTYPES:
                    hint = (": recompile one with `roboreel compile SRC OUT --resize HxW` so both cameras have "
                            "the same size")
                raise MixtureMismatch(f"feature {k!r} is {a.get('dtype')} {list(_shape(a))} in {names[0]} but "
                                      f"{b.get('dtype')} {list(_shape(b))} in {name}{hint}")
    common = set(keys)
    extra = {name: [k for k in f if k not in common] for name, f in zip(names, features, strict=True)}
    return keys, {n: e for n, e in extra.items() if e}


def aggregate_feature_stats(stats: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One feature's stats over several datasets, as LeRobot's ``aggregate_feature_stats``."""
    means = np.stack([np.asarray(s["mean"]) for s in stats])
    variances = np.stack([np.asarray(s["std"]) ** 2 for s in stats])
    counts = np.stack([np.asarray(s["count"]) for s in stats])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out = {"min": np.min(np.stack([np.asarray(s["min"]) for s in stats]), axis=0),
           "max": np.max(np.stack([np.asarray(s["max"]) for s in stats]), axis=0),
           "mean": mean, "std": np.sqrt(variance), "count": total}
    for q in [k for k in stats[0] if k.startswith("q") and k[1:].isdigit()]:
        if all(q in s for s in stats):
            out[q] = (np.stack([np.asarray(s[q]) for s in stats]) * counts).sum(axis=0) / total
    return out


def aggregate_stats(names: Sequence[str], stats: Sequence[Mapping[str, Mapping[str, np.ndarray]] | None],
                    keys: Sequence[str]) -> dict[str, dict[str, np.ndarray]] | None:
    """The mixture's stats of ``keys`` (the common features): None when no dataset has stats; an error naming
    the dataset when only some have them, or a key's stats lack what the aggregation needs."""
    have = [s is not None for s in stats]
    if not any(have):
        return None
    if not all(have):
        missing = [n for n, h in zip(names, have, strict=True) if not h]
        raise MixtureMismatch(f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no meta/stats.json "
                              f"but {names[have.index(True)]} has: the mixture's stats would leave them out")
    out: dict[str, dict[str, np.ndarray]] = {}
    for k in keys:
        per = [s.get(k) for s in stats if s is not None]
        if all(p is None for p in per):
            continue
        for name, p in zip(names, per, strict=True):
            lacking = [f for f in ("min", "max", "mean", "std", "count") if p is None or f not in p]
            if lacking:
                raise MixtureMismatch(f"stats of {k!r} in {name} lack {lacking}: they cannot be aggregated "
                                      "(LeRobot's aggregate_stats needs min, max, mean, std and count)")
        out[k] = aggregate_feature_stats(per)
    return out


def merge_tasks(tasks: Sequence[Mapping[int, str]]) -> tuple[list[str], list[np.ndarray]]:
    """(merged task strings by merged task_index; per dataset an int64 array: its task_index -> merged one, -1
    where it has no such index). ``tasks[i]`` is dataset i's ``{task_index: task}``."""
    merged: list[str] = []
    where: dict[str, int] = {}
    remaps = []
    for table in tasks:
        remap = np.full(max(table, default=-1) + 1, -1, dtype=np.int64)
        for i in sorted(table):
            t = table[i]
            if t not in where:
                where[t] = len(merged)
                merged.append(t)
            remap[i] = where[t]
        remaps.append(remap)
    return merged, remaps
