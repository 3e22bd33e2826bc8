"""The epoch plan: shard order and the rank/worker split are pure, exactly-once and balanced."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.plan import epoch_slices

from roboreel.formats.manifest import EpisodeEntry, Manifest, ShardEntry
from roboreel.reader.plan._epoch import (
    SplitOptions,
    World,
    consumer_slices,
    detect_rank,
    dropped_samples,
    rank_quotas,
    shard_order,
    uneven_split_message,
    worker_quotas,
)


def _manifest(shard_sizes: list[int], lengths: list[int]) -> Manifest:
    """A manifest index (no bytes needed: the plan only reads the index)."""
    shards, episodes, e, start = [], [], 0, 0
    for s, n in enumerate(shard_sizes):
        eps = list(range(e, e + n))
        shards.append(ShardEntry(path=f"shards/shard-{s:06d}.tar", size=0, sha256="", episodes=eps))
        for ep in eps:
            length = lengths[ep % len(lengths)]
            episodes.append(EpisodeEntry(index=ep, length=length, from_index=start, to_index=start + length,
                                         shard=s, tasks=[], members=[]))
            start += length
        e += n
    return Manifest(fps=20, features={}, cameras=[], tasks={}, shards=shards, episodes=episodes)


layouts = st.tuples(
    st.lists(st.integers(1, 4), min_size=1, max_size=10),  # episodes per shard
    st.lists(st.integers(1, 50), min_size=1, max_size=7),  # episode lengths (cycled)
    st.integers(1, 4),  # world size
    st.integers(1, 4),  # workers
    st.integers(0, 3),  # epoch
    st.booleans(),  # shuffle
)


layouts_split = st.tuples(layouts, st.sampled_from([None, True, False]), st.sampled_from([None, 1, 4, 8]))


@settings(max_examples=400, deadline=None)
@given(layouts_split)
def test_every_frame_emitted_once_ranks_equal_drops_are_the_tail(layout):
    """Over many layouts (world sizes 1-8 x workers 1-4, uneven shards, one shard, more consumers than
    episodes): consumers are disjoint, frames past the quotas are the epoch's last ``N mod world_size`` (with
    equal steps, the default when world_size > 1), every rank emits the same count, slices are contiguous
    runs in file order, and with a batch size every worker but one emits whole batches."""
    (shard_sizes, lengths, world_size, workers, epoch, shuffle), equal, batch = layout
    world_size *= 2 if world_size == 4 else 1  # up to 8 ranks
    m = _manifest(shard_sizes, lengths)
    opts = SplitOptions(equal_steps=equal, batch_size=batch)
    total = m.total_frames
    emitted: list[tuple[int, int]] = []
    per_rank = []
    for rank in range(world_size):
        n = 0
        per_worker = []
        for w in range(workers):
            slices = consumer_slices(m, World(rank, world_size, w, workers), seed=7, epoch=epoch, shuffle=shuffle,
                                     split_options=opts)
            k = 0
            for s in slices:
                in_shard = m.shards[s.shard].episodes
                first = in_shard.index(s.episodes[0])
                assert list(s.episodes) == in_shard[first : first + len(s.episodes)]
                for e, (a, b) in zip(s.episodes, s.frame_ranges(m.lengths), strict=True):
                    assert 0 <= a < b <= m.lengths[e]
                    emitted.extend((e, f) for f in range(a, b))
                    k += b - a
            per_worker.append(k)
            n += k
        per_rank.append(n)
        if batch:  # len(DataLoader) = ceil(n / batch) is what the workers' batches add up to
            assert sum(-(-k // batch) for k in per_worker) == -(-n // batch)
        else:
            assert max(per_worker) - min(per_worker) <= 1
    assert len(emitted) == len(set(emitted)) == sum(per_rank)
    dropped = dropped_samples(m, world_size, split_options=opts)
    assert total - len(emitted) == dropped
    if opts.equal(world_size):
        assert len(set(per_rank)) == 1 and dropped == total % world_size
    else:
        assert dropped == 0 and max(per_rank) - min(per_rank) <= 1
    # the dropped frames are the last ones of the epoch's order
    order = [(e, f) for s in epoch_slices(m, seed=7, epoch=epoch, shuffle=shuffle) for e in s.episodes
             for f in range(m.lengths[e])]
    assert set(order[len(order) - dropped:]) == set(order) - set(emitted)


def test_split_cuts_episodes_at_exact_quotas():
    # 3 shards of 4 episodes (10, 30, 10, 10 frames): 180 frames for 2 consumers of 90
    m = _manifest([4, 4, 4], [10, 30, 10, 10])
    out = [consumer_slices(m, World(0, 1, w, 2), seed=0, epoch=0, shuffle=False) for w in range(2)]
    assert [(s.shard, tuple(s.episodes), s.frame_ranges(m.lengths)) for s in out[0]] == [
        (0, (0, 1, 2, 3), ((0, 10), (0, 30), (0, 10), (0, 10))), (1, (4, 5), ((0, 10), (0, 20)))]
    assert [(s.shard, tuple(s.episodes), s.frame_ranges(m.lengths)) for s in out[1]] == [
        (1, (5, 6, 7), ((20, 30), (0, 10), (0, 10))), (2, (8, 9, 10, 11), ((0, 10), (0, 30), (0, 10), (0, 10)))]
    # one shard, more consumers than episodes: every consumer still gets its share of frames
    m = _manifest([1], [10])
    got = [consumer_slices(m, World(0, 1, w, 3), seed=0, epoch=0, shuffle=True) for w in range(3)]
    assert [g[0].ranges for g in got] == [((0, 4),), ((4, 7),), ((7, 10),)]


def test_worker_quotas_deal_whole_batches():
    # 30 samples, batch 8, 3 workers: 4 batches; workers 0,1,2 give batches 1,2,3 and worker 0 the 4th (6)
    assert worker_quotas(30, 3, batch_size=8) == [14, 8, 8]
    assert worker_quotas(30, 3) == [10, 10, 10] and worker_quotas(31, 3) == [11, 10, 10]
    assert worker_quotas(0, 2, batch_size=8) == [0, 0]
    assert rank_quotas(31, 3, equal_steps=True) == [10, 10, 10]
    assert rank_quotas(31, 3, equal_steps=False) == [11, 10, 10]


def test_episode_selection():
    m = _manifest([2, 2, 2], [10])
    got = consumer_slices(m, World(), seed=0, epoch=0, shuffle=False, episodes=[1, 4])
    assert [(s.shard, tuple(s.episodes)) for s in got] == [(0, (1,)), (2, (4,))]


def test_shard_order_is_a_seeded_permutation_per_epoch():
    orders = [shard_order(16, seed=3, epoch=e, shuffle=True) for e in range(4)]
    assert all(sorted(o) == list(range(16)) for o in orders)
    assert orders == [shard_order(16, seed=3, epoch=e, shuffle=True) for e in range(4)]  # pure
    assert len({tuple(o) for o in orders}) == 4  # new epoch, new order
    assert shard_order(16, seed=4, epoch=0, shuffle=True) != orders[0]
    # seed 1 / epoch 0 is not seed 0 / epoch 1 (SeedSequence entropy, not a sum)
    assert shard_order(16, seed=1, epoch=0, shuffle=True) != shard_order(16, seed=0, epoch=1, shuffle=True)
    assert shard_order(16, seed=3, epoch=2, shuffle=False) == list(range(16))


def test_uneven_message_only_when_not_divisible():
    assert uneven_split_message(8, World(0, 2, 0, 2)) is None
    msg = uneven_split_message(8, World(0, 1, 0, 3))
    assert msg is not None and "last 2 shards" in msg and "multiple of 3" in msg


def test_detect_rank(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert detect_rank() == (0, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert detect_rank() == (2, 3)
    assert detect_rank(1, 4) == (1, 4)  # arguments win
    with pytest.raises(ValueError, match="both rank and world_size"):
        detect_rank(1, None)
    with pytest.raises(ValueError, match="rank < world_size"):
        World(3, 3)
