"""The default sample order: GOP runs decoded front to back, emitted so that a batch holds no near-duplicates.

``frame_order="segments"`` (_pool.py) reads fast because each pooled episode emits the next frame of one GOP run:
the decoder only moves forward. But a batch then holds several consecutive frames of each of a few episodes
(measured on 1-camera ALOHA, batch 32: ~49 pairs of frames < 0.2 s apart where uniform sampling gives ~7), which
is not the batch a ``RandomSampler`` gives.

``ShuffledSchedule`` keeps the forward-only decoding and breaks the runs up:

- each pooled episode keeps up to ``runs_per_episode`` GOP runs open at once, at random places of the episode,
  each run decoded by a decoder of its own (a *lane*: ``lane`` after each pick), so every run still moves forward
  and every emitted frame costs about one decoded frame; ``run_end`` promises the rest of the run on its lane,
  so the decoder decodes the run in one call where the run cache has room and keeps its frames until they are
  drawn (decode/_runs.py), one frame a call where it has none;
- every pick is uniform over the open runs that are *eligible*: a run is not, for ``spread`` picks, once a frame of
  its episode within ``near`` frames of the run's next frame was emitted. With ``spread`` at least a batch (the
  consumer's share of it), no batch holds two frames of one episode less than ``near + 1`` frames apart, whatever
  the batch boundaries; the rest of the order is as random as the pool allows.

``runs_per_episode`` comes from ``open_runs`` (default ``2 x spread``, so that about half of the open runs are
eligible at any pick) spread over the pool: an epoch of few long episodes keeps many runs open per episode, a large
pool one or two. Once the last episode is admitted, the pool drains: its episodes open more runs (up to
``MAX_RUNS``) to keep ``2 x spread`` open. At the very end fewer runs are open than ``spread`` needs; a pick then
takes the run that has waited longest (the rule is relaxed, never the exactness).

Like every order here it is a pure function of the lengths and (seed, epoch, rank, worker, spread, near): replayed
to any position without data, which is what makes resume exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from roboreel.reader.plan._pool import _DRAWS, PoolSchedule

MAX_RUNS = 8  # runs (decoder lanes) one episode keeps open at most
DEFAULT_SPREAD = 32  # picks without a near-duplicate when the consumer's batch share is not known
_TRIES = 16  # uniform draws over the open runs before the eligible ones are listed


class ShuffledSchedule(PoolSchedule):
    """``PoolSchedule`` with ``frame_order="shuffled"`` (see the module doc). ``lane`` is the decoder lane of the
    frame the last pick returned (0 .. runs_per_episode - 1)."""

    def __init__(self, episodes: Sequence[int], lengths: Sequence[int], *, spread: int = DEFAULT_SPREAD,
                 near: int = 9, open_runs: int | None = None, **kwargs: Any) -> None:
        kwargs["frame_order"] = "segments"  # the base's checks; runs are aligned to ``gop`` as there
        super().__init__(episodes, lengths, **kwargs)
        if spread < 1 or near < 0:
            raise ValueError(f"spread must be >= 1 and near >= 0, got {spread} and {near}")
        self.frame_order = "shuffled"
        self.spread, self.near = int(spread), int(near)
        target = 2 * self.spread if open_runs is None else int(open_runs)
        live = max(1, min(self.pool_size, len(self.episodes)))
        self.runs_per_episode = min(MAX_RUNS, max(1, -(-target // live)))
        self._runs: list[list[Any]] = []  # [slot, cursor, end, lane, eligible from pick]
        self.lane = 0
        self._run_end: int | None = None

    def _draw(self) -> float:
        if self._d == len(self._draws):
            self._draws, self._d = self._rng.random(_DRAWS).tolist(), 0
        self._d += 1
        return self._draws[self._d - 1]

    def _fill(self) -> None:
        while len(self._slots) < self.pool_size and self.next_admit < len(self.episodes):
            pos = self.next_admit
            a, b = int(self.starts[pos]), int(self.stops[pos])
            rng = np.random.default_rng(np.random.SeedSequence([_TAG_RUNS, self.key.seed, self.key.epoch,
                                                                int(self.episodes[pos])]))
            first = a // self.gop * self.gop
            starts = np.arange(first, b, self.gop)
            # slot: [position, run starts left (popped from the end), open runs, recent (frame, pick), free lanes]
            slot: list[Any] = [pos, starts[rng.permutation(len(starts))].tolist()[::-1], [], [],
                               list(range(MAX_RUNS - 1, -1, -1))]
            self._slots.append(slot)
            self.next_admit += 1
            for _ in range(self.runs_per_episode):
                self._open(slot)

    def _open(self, slot: list[Any]) -> None:
        """Open the episode's next run on a free lane (nothing when it has no runs left)."""
        if not slot[1] or not slot[4]:
            return
        s = slot[1].pop()
        pos = slot[0]
        cursor = max(s, int(self.starts[pos]))
        now = self.emitted
        wait = max((p + self.spread for f, p in slot[3] if abs(f - cursor) <= self.near and p + self.spread > now),
                   default=0)
        run = [slot, cursor, min(s + self.gop, int(self.stops[pos])), slot[4].pop(), wait]
        slot[2].append(run)
        self._runs.append(run)

    def _pick(self) -> int:
        now, runs = self.emitted, self._runs
        n = len(runs)
        for _ in range(_TRIES):
            k = int(self._draw() * n)
            if runs[k][4] <= now:
                return k
        eligible = [i for i, r in enumerate(runs) if r[4] <= now]
        if eligible:
            return eligible[int(self._draw() * len(eligible))]
        return min(range(n), key=lambda i: runs[i][4])  # end of the epoch: the run that waited longest

    def __next__(self) -> tuple[int, int, bool]:
        self._fill()
        if not self._runs:
            raise StopIteration
        k = self._pick()
        run = self._runs[k]
        slot, frame, now = run[0], run[1], self.emitted
        run[1] += 1
        recent = slot[3]
        recent.append((frame, now))
        if len(recent) > self.spread:  # only picks inside the last ``spread`` can still block
            slot[3] = recent = [(f, p) for f, p in recent if p + self.spread > now]
        for other in slot[2]:
            if abs(other[1] - frame) <= self.near:
                other[4] = max(other[4], now + self.spread)
        self.lane, self._run_end = run[3], run[2]
        if run[1] == run[2]:  # run done: its lane takes the episode's next run
            self._runs.pop(k)
            slot[2] = [r for r in slot[2] if r is not run]
            slot[4].append(run[3])
            self._open(slot)
        if self.next_admit == len(self.episodes):  # draining: more runs per episode keep the rule longer
            while len(self._runs) < 2 * self.spread and slot[1] and slot[4]:
                self._open(slot)
        last = not slot[2]
        if last:
            self._slots = [s for s in self._slots if s is not slot]
        self.emitted += 1
        return slot[0], frame, last

    def run_end(self, frame: int, length: int) -> int | None:
        """End (exclusive) of the run the last pick came from: its next frames are asked on the same lane, in
        order, one each (other runs' frames between them), so the decoder may decode them with ``frame`` and keep
        them for their samples (the run cache, decode/_runs.py)."""
        return self._run_end


_TAG_RUNS = 0x5255_4E53  # "RUNS": the episode's run order, apart from every other random stream


def make_schedule(episodes: Sequence[int], lengths: Sequence[int], *, frame_order: str, spread: int | None = None,
                  near: int = 9, **kwargs: Any) -> PoolSchedule:
    """The schedule of ``frame_order``: "shuffled" (``ShuffledSchedule``; with ``shuffle=False`` file order, as
    every order), "segments" or "random" (``PoolSchedule``)."""
    if frame_order == "shuffled":
        if not kwargs.get("shuffle", True):
            return PoolSchedule(episodes, lengths, frame_order="segments", **kwargs)
        return ShuffledSchedule(episodes, lengths, spread=spread or DEFAULT_SPREAD, near=near, **kwargs)
    return PoolSchedule(episodes, lengths, frame_order=frame_order, **kwargs)  # type: ignore[arg-type]
