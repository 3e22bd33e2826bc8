"""Merging several datasets' metadata into one mixture's: stats and tasks. Pure functions of the values.
(Which features a mixture serves, and under which keys, is the reader's: reader/mixture/_canonical.py.)

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

_NEEDED = ("min", "max", "mean", "std", "count")


class MixtureMismatch(ValueError):
    """Datasets that cannot be mixed as they are (cameras of different sizes in one slot, stats missing, ...)."""


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


def stats_everywhere(names: Sequence[str], stats: Sequence[Mapping[str, Any] | None]) -> bool:
    """False when no dataset has stats; True when all have; an error naming those without when only some do (the
    mixture's stats would silently leave them out)."""
    have = [s is not None for s in stats]
    if not any(have):
        return False
    if not all(have):
        missing = [n for n, h in zip(names, have, strict=True) if not h]
        raise MixtureMismatch(f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no meta/stats.json "
                              f"but {names[have.index(True)]} has: the mixture's stats would leave them out")
    return True


def check_aggregatable(key: str, name: str, stats: Mapping[str, Any] | None) -> None:
    """An error naming the dataset when ``key``'s stats lack what LeRobot's aggregation needs."""
    lacking = [f for f in _NEEDED if stats is None or f not in stats]
    if lacking:
        raise MixtureMismatch(f"stats of {key!r} in {name} lack {lacking}: they cannot be aggregated "
                              "(LeRobot's aggregate_stats needs min, max, mean, std and count)")


def aggregate_stats(names: Sequence[str], stats: Sequence[Mapping[str, Mapping[str, np.ndarray]] | None],
                    keys: Sequence[str]) -> dict[str, dict[str, np.ndarray]] | None:
    """The mixture's stats of ``keys`` (the common features): None when no dataset has stats; an error naming
    the dataset when only some have them, or a key's stats lack what the aggregation needs."""
    if not stats_everywhere(names, stats):
        return None
    out: dict[str, dict[str, np.ndarray]] = {}
    for k in keys:
        per = [s.get(k) for s in stats if s is not None]
        if all(p is None for p in per):
            continue
        for name, p in zip(names, per, strict=True):
            check_aggregatable(k, name, p)
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
