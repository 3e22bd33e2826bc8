"""A mixture's statistics over its canonical features, with padded dimensions and missing cameras kept out.

LeRobot's ``aggregate_stats`` pools members feature by feature (count-weighted mean, pooled variance, min of
mins, ...). Over canonical keys the pool is per *element*: dimension ``j`` of a padded feature pools only the
members that have a ``j``-th dimension, and a camera pools only the members that have it, so a zero that padding
or a missing camera put into a sample never enters the numbers. Where every member has every element this is
exactly ``aggregate_stats`` (formats/merge.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from roboreel.formats.merge import check_aggregatable, stats_everywhere
from roboreel.reader.mixture._canonical import Canonical

Stats = dict[str, dict[str, np.ndarray]]


def member_stats(canon: Canonical, index: int, stats: Mapping[str, Mapping[str, Any]] | None) -> Stats | None:
    """Member ``index``'s own stats under canonical keys (its own sizes, unpadded)."""
    if stats is None:
        return None
    m = canon.members[index]
    return {c: {n: np.asarray(v) for n, v in stats[own].items()} for own, c in m.rename.items() if own in stats}


def _padded(x: np.ndarray, size: int | None, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """(``x`` padded on its first axis to ``size`` with ``fill``, True where ``x`` had a value)."""
    x = np.asarray(x, dtype=np.float64)
    valid = np.ones(x.shape, dtype=bool)
    if size is None or x.ndim != 1 or x.shape[0] >= size:
        return x, valid
    pad = size - x.shape[0]
    return np.concatenate([x, np.full(pad, fill)]), np.concatenate([valid, np.zeros(pad, dtype=bool)])


def canonical_stats(canon: Canonical, stats: Sequence[Mapping[str, Mapping[str, Any]] | None]) -> Stats | None:
    """The pooled stats of every canonical feature (see the module doc); None when no member has stats."""
    urls = [m.url for m in canon.members]
    if not stats_everywhere(urls, stats):
        return None
    out: Stats = {}
    for c in canon.features:
        per = [(m.url, s.get(m.own[c])) for m, s in zip(canon.members, stats, strict=True)  # type: ignore[union-attr]
               if c in m.own]
        if all(p is None for _, p in per):
            continue
        for url, p in per:
            check_aggregatable(c, url, p)
        out[c] = _pool([p for _, p in per], canon.sizes.get(c))  # type: ignore[misc]
    return out


def _pool(stats: list[Mapping[str, Any]], size: int | None) -> dict[str, np.ndarray]:
    means, valid = zip(*(_padded(s["mean"], size, 0.0) for s in stats), strict=True)
    mean_i, ok = np.stack(means), np.stack(valid)
    var_i = np.stack([_padded(np.asarray(s["std"], dtype=np.float64) ** 2, size, 0.0)[0] for s in stats])
    counts = np.stack([np.asarray(s["count"], dtype=np.float64) for s in stats])
    c = counts.reshape(counts.shape[0], *([1] * (mean_i.ndim - 1))) if counts.ndim == 1 or counts[0].size == 1 \
        else counts
    w = np.where(ok, c, 0.0)
    total = w.sum(axis=0)
    mean = (mean_i * w).sum(axis=0) / total
    var = ((var_i + (mean_i - mean) ** 2) * w).sum(axis=0) / total
    lo = np.stack([_padded(s["min"], size, np.inf)[0] for s in stats]).min(axis=0)
    hi = np.stack([_padded(s["max"], size, -np.inf)[0] for s in stats]).max(axis=0)
    dtype = np.asarray(stats[0]["mean"]).dtype
    out = {"min": lo.astype(np.asarray(stats[0]["min"]).dtype), "max": hi.astype(np.asarray(stats[0]["max"]).dtype),
           "mean": mean.astype(dtype), "std": np.sqrt(var).astype(np.asarray(stats[0]["std"]).dtype),
           "count": counts.sum(axis=0).astype(np.asarray(stats[0]["count"]).dtype)}
    for q in [k for k in stats[0] if k.startswith("q") and k[1:].isdigit()]:
        if all(q in s for s in stats):
            qs = np.stack([_padded(s[q], size, 0.0)[0] for s in stats])
            out[q] = ((qs * w).sum(axis=0) / total).astype(np.asarray(stats[0][q]).dtype)
    return out
