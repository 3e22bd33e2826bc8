"""The mixture plan: which member dataset every draw of an epoch comes from, and what each member then reads.

A mixture epoch is ``T`` draws (``samples_per_epoch``, default the members' frames together). Member ``i`` gets
an exact quota ``T_i`` of them: ``N_i`` (its selected frames) with ``weights=None``, else ``w_i * T`` rounded by
largest remainder, so over any epoch each member's share is its weight to within ``1 / T`` (drawing members
independently would miss a 50/50 weight by 2 points in ~1% of 4,000-draw epochs). The draws' order is a seeded
permutation of that multiset (``shuffle``), or, without shuffle, the members one after another (``weights=None``)
or evenly interleaved (weights). So a draw's member is an int array, a pure function of (seed, epoch).

Every member reads its own *virtual stream* of ``T_i`` frames: pass 0 of its epoch order, then pass 1 (a fresh
seeded shard order), ... (a small member repeats, a large one stops early: only the first ``T_i`` frames of a
fresh order are read). The draws are cut between ranks and workers exactly as one dataset's frames are
(``consumer_range`` over ``T``: equal steps per rank, whole batches per worker), and the consumer owning draws
``[lo, hi)`` reads, of member ``i``, the frames ``[count_i(draws < lo), count_i(draws < hi))`` of its virtual
stream: contiguous runs, disjoint between consumers, together exactly ``T_i``. Each member keeps its own episode
pool in each consumer (the pool size split by the members' shares, ``pool_sizes``); the draws say which pool
gives the next sample, so resuming after ``n`` samples skips
``count_i(first n draws)`` picks in pool ``i``: arithmetic, no replay of data.

Pure functions of the members' frame counts and (seed, epoch, world): no I/O, so every rank computes the same.
webdataset's ``RandomMix`` draws members with ``random.random()`` per sample and cannot resume; torchdata's
``MultiNodeWeightedSampler`` draws per rank and stops at the first exhausted member; this plan does neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from roboreel.formats.manifest import Manifest
from roboreel.reader.plan import Selection, Slice, SplitOptions, World, consumer_range, take

TAG_MIX_DRAWS = 0x313C
TAG_MIX_PASS = 0x3A55
TAG_MIX_MEMBER = 0x3E3B


def member_quotas(totals: Sequence[int], weights: Sequence[float] | None, samples: int | None) -> np.ndarray:
    """Draws per member in an epoch: the members' frames (``weights=None``), else ``weights`` (normalised) of
    ``samples`` (default: the frames together), rounded by largest remainder so they sum to exactly that."""
    n = np.asarray(totals, dtype=np.int64)
    if weights is None:
        return n.copy()
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    t = int(n.sum()) if samples is None else int(samples)
    ideal = w * t
    q = np.floor(ideal).astype(np.int64)
    rest = t - int(q.sum())
    if rest:  # largest remainders first; ties to the lower member index (a stable sort)
        order = np.argsort(-(ideal - q), kind="stable")
        q[order[:rest]] += 1
    return q


def _dtype(members: int) -> type:
    return np.int8 if members < 2**7 else np.int16 if members < 2**15 else np.int32


@dataclass(frozen=True)
class MixturePlan:
    """A mixture of ``len(totals)`` members (``totals``: each member's selected frames per pass).

    Args:
        totals: frames of each member's selection.
        weights: draw probability of each member (any positive scale), or None: every frame of every member once.
        samples_per_epoch: draws per epoch with weights (default: ``sum(totals)``).
        seed, shuffle: as the datasets'.
    """

    totals: tuple[int, ...]
    weights: tuple[float, ...] | None = None
    samples_per_epoch: int | None = None
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        if len(self.totals) < 1:
            raise ValueError("a mixture needs at least one dataset")
        if self.weights is not None:
            if len(self.weights) != len(self.totals):
                raise ValueError(f"weights has {len(self.weights)} values for {len(self.totals)} datasets")
            if any(not np.isfinite(w) or w < 0 for w in self.weights) or not sum(self.weights) > 0:
                raise ValueError(f"weights must be finite, >= 0 and not all 0, got {list(self.weights)}")
        elif self.samples_per_epoch is not None:
            raise ValueError("samples_per_epoch needs weights: weights=None reads every frame once per epoch")
        if self.samples_per_epoch is not None and (isinstance(self.samples_per_epoch, bool) or
                                                   not isinstance(self.samples_per_epoch, int | np.integer)
                                                   or self.samples_per_epoch < 1):
            raise ValueError(f"samples_per_epoch must be a positive integer, got {self.samples_per_epoch!r}")

    @property
    def quotas(self) -> np.ndarray:
        """Draws of each member per epoch (the same every epoch)."""
        return member_quotas(self.totals, self.weights, self.samples_per_epoch)

    @property
    def size(self) -> int:
        """Draws per epoch, all ranks together."""
        return int(self.quotas.sum())

    def pool_sizes(self, pool_size: int) -> np.ndarray:
        """Each member's episode pool in a consumer: ``pool_size`` split by the members' shares of the draws
        (largest remainder), at least 1 for a member drawn at all. So a consumer holds about ``pool_size`` episodes
        whatever the number of members (memory, open decoders, episodes read at an epoch's start, as for one
        dataset), and a member's episodes leave its pool at the rate of one dataset's."""
        q = self.quotas
        if not q.sum():
            return np.zeros_like(q)
        return np.where(q > 0, np.maximum(member_quotas(q.tolist(), q.tolist(), pool_size), 1), 0)

    def member_seed(self, member: int) -> int:
        """The seed of member ``member``'s pools and pass orders: independent of the other members'."""
        return int(np.random.SeedSequence([TAG_MIX_MEMBER, self.seed, member]).generate_state(1)[0])

    def draws(self, epoch: int) -> np.ndarray:
        """The member of every draw of ``epoch`` (length ``size``, a small int dtype)."""
        q = self.quotas
        members = np.repeat(np.arange(len(q), dtype=_dtype(len(q))), q)
        if self.shuffle:
            rng = np.random.default_rng(np.random.SeedSequence([TAG_MIX_DRAWS, self.seed, epoch]))
            return members[rng.permutation(len(members))]
        if self.weights is None:
            return members  # concatenation, member by member
        # evenly interleaved: member i's k-th draw sits at (k + 1/2) / q_i of the epoch
        where = np.concatenate([(np.arange(n) + 0.5) / n for n in q.tolist()]) if len(members) else np.zeros(0)
        return members[np.argsort(where, kind="stable")]

    def consumer_draws(self, epoch: int, world: World, split: SplitOptions | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """``(members, before)``: the member of each draw consumer ``world`` emits, in order, and per member the
        draws of it that come before this consumer's (where it starts in that member's virtual stream)."""
        lo, hi = consumer_range(self.size, world, split or SplitOptions())
        d = self.draws(epoch)
        before = np.bincount(d[:lo], minlength=len(self.totals)).astype(np.int64)
        return d[lo:hi], before

    def pass_order(self, member: int, epoch: int, pas: int, num_shards: int) -> np.ndarray:
        """Shard order (positions into the member's selection) of pass ``pas`` of ``member`` in ``epoch``."""
        if not self.shuffle:
            return np.arange(num_shards)
        rng = np.random.default_rng(np.random.SeedSequence([TAG_MIX_PASS, self.member_seed(member), epoch, pas]))
        return rng.permutation(num_shards)


def member_slices(plan: MixturePlan, member: int, manifest: Manifest, sel: Selection, epoch: int, lo: int,
                  hi: int) -> list[Slice]:
    """Frames ``[lo, hi)`` of ``member``'s virtual stream in ``epoch`` (pass after pass of ``sel``), as slices in
    reading order. An episode may come twice (two passes); the reader tells the copies apart (consumer.py)."""
    n = sel.total
    if hi <= lo:
        return []
    if n == 0:
        raise ValueError(f"dataset {member} of the mixture selects no frames but is asked for {hi - lo}")
    out: list[Slice] = []
    for p in range(lo // n, (hi - 1) // n + 1):
        a, b = max(lo, p * n) - p * n, min(hi, (p + 1) * n) - p * n
        out += take(manifest, sel, plan.pass_order(member, epoch, p, len(sel.shards)).tolist(), a, b)
    return out


def skip_counts(members: np.ndarray, n: int, num_members: int) -> np.ndarray:
    """Picks each member's pool has made once a consumer emitted its first ``n`` draws ``members``."""
    return np.bincount(members[:n], minlength=num_members).astype(np.int64)
