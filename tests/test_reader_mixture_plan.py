"""The mixture plan (reader/mixture/_plan.py) as properties: weights met, determinism, equal steps for world sizes
1-4 and 0-3 DataLoader workers, every member's virtual stream cut into disjoint runs that cover it, resume
arithmetic. Pure: no data is read, except one compiled index for the passes of a repeating member."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from support.datasets import compiled_pair

from roboreel.formats.manifest import load_manifest
from roboreel.reader.mixture._plan import MixturePlan, member_quotas, member_slices, skip_counts
from roboreel.reader.plan._epoch import SplitOptions, World, selection


def test_quotas_meet_the_weights_within_one_draw():
    rng = np.random.default_rng(0)
    for _ in range(200):
        m = int(rng.integers(1, 6))
        w = rng.random(m) + 0.01
        t = int(rng.integers(1, 10_000))
        q = member_quotas([1] * m, w.tolist(), t)
        assert q.sum() == t and (q >= 0).all()
        assert np.abs(q - w / w.sum() * t).max() < 1  # largest remainder: every share within one draw
    assert member_quotas([170, 40], None, None).tolist() == [170, 40]
    assert member_quotas([170, 40], [0.7, 0.3], None).tolist() == [147, 63]  # an epoch is the frames together
    assert member_quotas([10, 10], [1.0, 0.0], 7).tolist() == [7, 0]


@pytest.mark.parametrize("weights", [(0.7, 0.3), (0.5, 0.25, 0.25), (0.9, 0.05, 0.05)])
def test_shares_of_a_4000_draw_epoch_are_within_two_points(weights):
    plan = MixturePlan((3000, 500, 200)[:len(weights)], weights, 4000, seed=1)
    for epoch in range(3):
        d = plan.draws(epoch)
        share = np.bincount(d, minlength=len(weights)) / len(d)
        assert len(d) == 4000 and np.abs(share - np.array(weights)).max() < 0.02
        # shuffled: the first half of the epoch is mixed too (not member after member)
        half = np.bincount(d[:2000], minlength=len(weights)) / 2000
        assert np.abs(half - np.array(weights)).max() < 0.05


def test_draws_are_a_pure_function_of_seed_and_epoch():
    a = MixturePlan((120, 40), (0.6, 0.4), 500, seed=3)
    b = MixturePlan((120, 40), (0.6, 0.4), 500, seed=3)
    assert np.array_equal(a.draws(2), b.draws(2))
    assert not np.array_equal(a.draws(2), a.draws(3))
    assert not np.array_equal(a.draws(2), MixturePlan((120, 40), (0.6, 0.4), 500, seed=4).draws(2))
    assert a.member_seed(0) != a.member_seed(1)
    # without shuffle: concatenation (weights=None) or an even interleave (weights), the same every epoch
    cat = MixturePlan((5, 3), shuffle=False).draws(0)
    assert cat.tolist() == [0] * 5 + [1] * 3
    even = MixturePlan((5, 3), (0.5, 0.5), 8, shuffle=False).draws(7)
    assert sorted(even.tolist()) == [0] * 4 + [1] * 4 and even.tolist() != sorted(even.tolist())
    # weights=None: every frame of every member once
    assert np.bincount(MixturePlan((120, 40), seed=9).draws(1)).tolist() == [120, 40]


@pytest.mark.parametrize("batch_size", [None, 3])
def test_equal_steps_and_disjoint_runs_for_every_world_and_worker_count(batch_size):
    plan = MixturePlan((97, 31, 12), (0.5, 0.3, 0.2), 211, seed=5)
    split = SplitOptions(batch_size=batch_size)
    for world_size, num_workers in itertools.product(range(1, 5), range(0, 4)):
        k = max(1, num_workers)
        epoch = world_size + 10 * num_workers
        full = plan.draws(epoch)
        per_rank, runs = [], {m: [] for m in range(3)}
        seen = []
        for rank in range(world_size):
            n = 0
            for worker in range(k):
                draws, before = plan.consumer_draws(epoch, World(rank, world_size, worker, k), split)
                counts = np.bincount(draws, minlength=3)
                for m in range(3):
                    runs[m].append((int(before[m]), int(before[m] + counts[m])))
                seen.append(draws)
                n += len(draws)
            per_rank.append(n)
        assert len(set(per_rank)) == 1, (world_size, num_workers, per_rank)  # equal steps on every rank
        assert sum(per_rank) == 211 - 211 % world_size  # DistributedSampler(drop_last): < world_size dropped
        # consumers in (rank, worker) order read the epoch's draws in order, nothing twice
        assert np.array_equal(np.concatenate(seen), full[:sum(per_rank)])
        for m in range(3):  # each member's virtual stream: disjoint contiguous runs, in order, from 0
            ends = [a for r in runs[m] for a in r]
            assert ends[0] == 0 and ends == sorted(ends)
            assert all(runs[m][i][1] == runs[m][i + 1][0] for i in range(len(runs[m]) - 1))


def test_resume_skips_each_pool_by_the_draws_before_it():
    plan = MixturePlan((60, 25), (0.5, 0.5), 100, seed=2)
    draws, _ = plan.consumer_draws(0, World(0, 1, 0, 1))
    for n in (0, 1, 37, 100):
        got = skip_counts(draws, n, 2)
        assert got.tolist() == [int((draws[:n] == 0).sum()), int((draws[:n] == 1).sum())]
        assert got.sum() == n


def test_checks_refuse_what_they_cannot_honour():
    with pytest.raises(ValueError, match="3 values for 2 datasets"):
        MixturePlan((1, 2), (0.2, 0.3, 0.5))
    with pytest.raises(ValueError, match="not all 0"):
        MixturePlan((1, 2), (0.0, 0.0))
    with pytest.raises(ValueError, match="needs weights"):
        MixturePlan((1, 2), None, 10)
    with pytest.raises(ValueError, match="positive integer"):
        MixturePlan((1, 2), (1, 1), 0)


def test_a_small_member_repeats_pass_after_pass_in_fresh_orders(tmp_path_factory):
    """A member drawn 2.5x its frames reads every frame twice and half of them a third time: pass 0, 1 in full
    (different shard orders), then the start of pass 2."""
    _, compiled = compiled_pair(tmp_path_factory, episodes_per_shard=2)
    m = load_manifest(str(compiled))
    sel = selection(m)
    n = sel.total
    plan = MixturePlan((n, n), (5, 2), 7 * n // 2, seed=4)  # member 0: 5/7 of 3.5 n = 2.5 n
    t = int(plan.quotas[0])
    assert n * 2 < t < n * 3
    lengths = m.lengths
    frames = []
    cut = t // 3  # two consumers' runs: the frames are the same whatever the cut
    for lo, hi in ((0, cut), (cut, t)):
        for s in member_slices(plan, 0, m, sel, 0, lo, hi):
            for e, (a, b) in zip(s.episodes, s.frame_ranges(lengths), strict=True):
                frames += [(int(e), f) for f in range(a, b)]
    assert len(frames) == t
    counts = np.unique(np.array([hash(f) for f in frames]), return_counts=True)[1]
    assert sorted(set(counts.tolist())) == [2, 3] and len(counts) == n
    orders = [plan.pass_order(0, 0, p, len(sel.shards)).tolist() for p in range(3)]
    assert len({tuple(o) for o in orders}) > 1  # each pass a fresh shard order


def test_one_pool_size_is_split_between_the_members():
    plan = MixturePlan((3000, 1000, 50), (0.625, 0.25, 0.125), 4000)
    assert plan.pool_sizes(16).tolist() == [10, 4, 2] and plan.pool_sizes(2).tolist() == [1, 1, 1]
    assert MixturePlan((3000, 1000), None).pool_sizes(16).tolist() == [12, 4]
    assert MixturePlan((30, 10), (1.0, 0.0), 40).pool_sizes(16).tolist() == [16, 0]  # a member never drawn
