"""Sample order as a measured property: how independent a batch's samples are, beside uniform sampling.

Speed that comes from serving neighbouring frames of few episodes is not speed a training run can use: a batch of
near-duplicates carries less information than one of independent frames. Two figures say how far a reader's
batches are from what ``LeRobotDataset`` under a ``RandomSampler`` gives (every batch a uniform draw without
replacement from all frames):

- **distinct episodes per batch**;
- **near-duplicate pairs per batch**: pairs of samples of one episode less than ``NEAR_DUPLICATE_S`` apart (by
  their ``timestamp``, less ``TOLERANCE_S`` so that float32 timestamps exactly ``NEAR_DUPLICATE_S`` apart do not
  count: at 50 fps frames 9 apart are near, 10 apart are not).

``uniform_order`` is the exact expectation of both under uniform sampling of the same episodes, ``OrderMeter``
the running means of a reader's batches (``roboreel.loader``'s ``stats()["order"]``, ``roboreel bench``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

NEAR_DUPLICATE_S = 0.2
TOLERANCE_S = 1e-4  # LeRobot's timestamp tolerance; far below any frame interval


def near_offsets(fps: float, near_s: float = NEAR_DUPLICATE_S) -> int:
    """The largest frame distance d that counts as near (d / fps < near_s, as ``batch_order`` compares
    timestamps): 9 at 50 fps, 5 at 30 fps."""
    return max(0, math.ceil((near_s - TOLERANCE_S) * fps) - 1)


def batch_order(episodes: Sequence[int] | np.ndarray, timestamps: Sequence[float] | np.ndarray, *,
                near_s: float = NEAR_DUPLICATE_S) -> tuple[int, int]:
    """(distinct episodes, near-duplicate pairs) of one batch, from its samples' episode keys and timestamps in
    seconds (a mixture passes keys that are unique across its members)."""
    ep = np.asarray(episodes, dtype=np.int64).reshape(-1)
    ts = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    if ep.shape != ts.shape:
        raise ValueError(f"{ep.size} episode keys for {ts.size} timestamps")
    order = np.lexsort((ts, ep))
    ep, ts = ep[order], ts[order]
    pairs = 0
    starts = np.flatnonzero(np.r_[True, ep[1:] != ep[:-1]]) if ep.size else np.array([], dtype=np.int64)
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), ep.size], strict=True):
        t = ts[a:b]  # sorted: the samples after each one and under near_s from it
        pairs += int((np.searchsorted(t, t + (near_s - TOLERANCE_S), side="left") - np.arange(1, t.size + 1)).sum())
    return len(starts), pairs


def _none_drawn(n: int, k: int, b: int) -> float:
    """P(none of ``k`` marked items among ``b`` drawn without replacement from ``n``): C(n-k, b) / C(n, b)."""
    if k == 0:
        return 1.0
    if n - k < b:
        return 0.0
    return math.exp(math.lgamma(n - k + 1) - math.lgamma(n - k - b + 1) - math.lgamma(n + 1) + math.lgamma(n - b + 1))


def uniform_order(lengths: Sequence[int] | np.ndarray, *, fps: float, batch_size: int,
                  near_s: float = NEAR_DUPLICATE_S) -> tuple[float, float]:
    """Expected (distinct episodes, near-duplicate pairs) of a batch of ``batch_size`` frames drawn uniformly
    without replacement from episodes of ``lengths``, as a ``RandomSampler`` over all their frames draws them."""
    lens = np.asarray(lengths, dtype=np.int64)
    n, b = int(lens.sum()), int(batch_size)
    if n == 0 or b <= 0:
        return 0.0, 0.0
    b = min(b, n)
    distinct = 0.0
    for length, count in Counter(lens.tolist()).items():
        distinct += count * (1.0 - _none_drawn(n, length, b))
    d = near_offsets(fps, near_s)
    near_pairs = sum(int(np.clip(lens - k, 0, None).sum()) for k in range(1, d + 1))
    both = b * (b - 1) / (n * (n - 1)) if n > 1 else 0.0
    return distinct, near_pairs * both


def order_keys(values: dict) -> tuple[np.ndarray, np.ndarray]:
    """(episode keys, timestamps) of a collated batch's values: a mixture's episodes keyed by member too
    (``dataset_index``), since members number their episodes from 0 each."""
    episodes = np.asarray(values["episode_index"], dtype=np.int64).reshape(-1)
    if "dataset_index" in values:
        episodes = (np.asarray(values["dataset_index"], dtype=np.int64).reshape(-1) << 32) | episodes
    return episodes, np.asarray(values["timestamp"], dtype=np.float64).reshape(-1)


class OrderMeter:
    """Running order figures of a reader's batches; ``summary`` sets them beside uniform sampling's."""

    def __init__(self) -> None:
        self.batches = 0
        self.distinct = 0
        self.pairs = 0
        self.sizes: Counter[int] = Counter()

    def add(self, episodes: Sequence[int] | np.ndarray, timestamps: Sequence[float] | np.ndarray) -> None:
        distinct, pairs = batch_order(episodes, timestamps)
        self.batches += 1
        self.distinct += distinct
        self.pairs += pairs
        self.sizes[int(np.asarray(timestamps).size)] += 1

    def summary(self, lengths: Sequence[int] | np.ndarray | None, *, fps: float | None) -> dict[str, float | int | None]:
        """Means per batch so far; the uniform figures average ``uniform_order`` over the batch sizes seen (None
        without ``lengths``, e.g. a mixture, whose draws are weighted)."""
        if not self.batches:
            return {"batches": 0, "distinct_episodes_per_batch": None, "near_duplicate_pairs_per_batch": None,
                    "uniform_distinct_episodes_per_batch": None, "uniform_near_duplicate_pairs_per_batch": None}
        uniform_d = uniform_p = None
        if lengths is not None and fps:
            per = {b: uniform_order(lengths, fps=fps, batch_size=b) for b in self.sizes}
            uniform_d = sum(per[b][0] * c for b, c in self.sizes.items()) / self.batches
            uniform_p = sum(per[b][1] * c for b, c in self.sizes.items()) / self.batches
        return {"batches": self.batches, "distinct_episodes_per_batch": self.distinct / self.batches,
                "near_duplicate_pairs_per_batch": self.pairs / self.batches,
                "uniform_distinct_episodes_per_batch": uniform_d, "uniform_near_duplicate_pairs_per_batch": uniform_p}
