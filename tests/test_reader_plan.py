"""The epoch plan: shard order and the rank/worker split are pure, exactly-once and balanced."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roboreel.formats.manifest import EpisodeEntry, Manifest, ShardEntry
from roboreel.reader.plan import (
    World,
    consumer_slices,
    detect_rank,
    selected_shards,
    shard_order,
    split,
    uneven_split_message,
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


@settings(max_examples=150, deadline=None)
@given(layouts)
def test_every_episode_read_exactly_once_by_disjoint_consumers(layout):
    shard_sizes, lengths, world_size, workers, epoch, shuffle = layout
    m = _manifest(shard_sizes, lengths)
    seen: list[int] = []
    per_rank: list[set[int]] = []
    for rank in range(world_size):
        mine: set[int] = set()
        for w in range(workers):
            slices = consumer_slices(m, World(rank, world_size, w, workers), seed=7, epoch=epoch, shuffle=shuffle)
            for s in slices:
                in_shard = m.shards[s.shard].episodes
                # a slice is a contiguous run of its shard, in file order
                first = in_shard.index(s.episodes[0])
                assert list(s.episodes) == in_shard[first : first + len(s.episodes)]
                seen.extend(s.episodes)
                mine.update(s.episodes)
        per_rank.append(mine)
    assert sorted(seen) == [e.index for e in m.episodes]
    for a in range(world_size):
        for b in range(a + 1, world_size):
            assert not per_rank[a] & per_rank[b]
    consumers = world_size * workers
    if len(shard_sizes) % consumers == 0:  # divisible: whole shards only, the same number each
        whole = [len(consumer_slices(m, World(r, world_size, w, workers), seed=7, epoch=epoch, shuffle=shuffle))
                 for r in range(world_size) for w in range(workers)]
        assert len(set(whole)) == 1


def test_remainder_split_is_balanced_by_frames():
    # 3 shards of 4 episodes for 2 consumers: 2 whole shards dealt out, the third split in two runs by frames
    m = _manifest([4, 4, 4], [10, 30, 10, 10])
    out = split(selected_shards(m, None), {e.index: e.length for e in m.episodes}, 2)
    assert [len(o) for o in out] == [2, 2]
    assert out[0][0].episodes == (0, 1, 2, 3) and out[1][0].episodes == (4, 5, 6, 7)
    assert out[0][1].episodes == (8, 9) and out[1][1].episodes == (10, 11)  # 40 | 20 frames: the midpoint rule
    # fewer shards than consumers: every consumer gets a run, none is left out while others have several
    m = _manifest([6], [10])
    out = split(selected_shards(m, None), {e.index: 10 for e in m.episodes}, 3)
    assert [o[0].episodes for o in out] == [(0, 1), (2, 3), (4, 5)]


def test_workers_without_data_get_nothing():
    m = _manifest([1], [10])
    got = [consumer_slices(m, World(0, 1, w, 3), seed=0, epoch=0, shuffle=True) for w in range(3)]
    assert sorted(len(g) for g in got) == [0, 0, 1]


def test_episode_selection():
    m = _manifest([2, 2, 2], [10])
    got = consumer_slices(m, World(), seed=0, epoch=0, shuffle=False, episodes=[1, 4])
    assert [(s.shard, s.episodes) for s in got] == [(0, (1,)), (2, (4,))]


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
