"""Distribution through real DataLoaders: exactly-once per epoch across ranks and workers, determinism,
reshuffling, episode mixing, stats aggregated across workers."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from support.datasets import batch_indices, compiled_pair

from roboreel.reader import CompiledDataset
from roboreel.reader.plan._epoch import World

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def eight_shards(tmp_path_factory):  # 8 shards: divides 1, 2, 4 consumers; not 3, 6, 9
    return compiled_pair(tmp_path_factory, episodes_per_shard=1)[1]


@pytest.fixture(scope="module")
def three_shards(tmp_path_factory):  # 3 shards: divides 1, 3 consumers; not 2, 4, 6, 9
    return compiled_pair(tmp_path_factory, episodes_per_shard=3)[1]


def epoch_indices(path, *, rank=0, world_size=1, num_workers=0, epoch=0, batch_size=5, **kw) -> list[list[int]]:
    ds = CompiledDataset(str(path), rank=rank, world_size=world_size, episode_pool_size=2, return_uint8=True, **kw)
    ds.set_epoch(epoch)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=num_workers)
    return [batch_indices(b) for b in loader]


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory):  # 1 shard: fewer shards than ranks and workers
    return compiled_pair(tmp_path_factory, episodes_per_shard=100)[1]


def planned_indices(ds: CompiledDataset, world_size: int, num_workers: int, epoch: int) -> list[list[list[int]]]:
    """The sample indices each (rank, worker) consumer of the epoch is to emit, from the dataset's own plan (pure
    functions of the manifest: plan/_epoch.py); ``num_workers=0`` reads in the main process, one consumer."""
    m = ds.manifest
    out = []
    for rank in range(world_size):
        per_worker = []
        for w in range(max(1, num_workers)):
            got = []
            for s in ds._slices(World(rank, world_size, w, max(1, num_workers)), epoch):
                for e, (a, b) in zip(s.episodes, s.frame_ranges(m.lengths), strict=True):
                    got.extend(range(m.episode(int(e)).from_index + a, m.episode(int(e)).from_index + b))
            per_worker.append(got)
        out.append(per_worker)
    return out


def check_split(path, world_size: int, num_workers: int, *, batch: int = 5, epoch: int = 1) -> list[list[int]]:
    """Every rank's planned samples: as many on every rank, ``len(ds)`` of them, in ``len(DataLoader)`` batches
    (each worker's partial batch included), disjoint across ranks and workers, every sample once except the
    ``N mod world_size`` the split drops (reported). Returns each rank's sorted indices."""
    total = CompiledDataset(str(path)).manifest.total_frames
    per_rank = []
    for rank, workers in enumerate(planned_indices(
            CompiledDataset(str(path), rank=0, world_size=world_size, batch_size=batch), world_size, num_workers,
            epoch)):
        ds = CompiledDataset(str(path), rank=rank, world_size=world_size, batch_size=batch)
        flat = [i for w in workers for i in w]
        assert len(flat) == len(ds) == ds.rank_samples()[rank]  # __len__ is exact
        loader_len = len(torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=num_workers))
        assert sum(-(-len(w) // batch) for w in workers) == loader_len  # len(DataLoader) is exact
        per_rank.append(sorted(flat))
    dropped = CompiledDataset(str(path), rank=0, world_size=world_size).dropped_samples()
    assert dropped == (total % world_size if world_size > 1 else 0)
    assert len({len(p) for p in per_rank}) == 1  # equal steps on every rank
    everything = [i for got in per_rank for i in got]
    assert len(everything) == len(set(everything)) == total - dropped  # no duplicates, ranks disjoint
    assert set(everything) <= set(range(total))
    return per_rank


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("num_workers", [0, 2, 3])
@pytest.mark.parametrize("layout", ["eight_shards", "three_shards", "one_shard"])
def test_planned_split_equal_steps_exactly_once_and_exact_lengths(layout, world_size, num_workers, request):
    """The whole matrix at plan level: what every rank and worker is to emit (no DataLoader)."""
    check_split(request.getfixturevalue(layout), world_size, num_workers)


@pytest.mark.parametrize(("layout", "world_size", "num_workers"), [
    ("eight_shards", 3, 0),  # the main process reads; 8 shards do not divide 3 ranks, 1 sample dropped
    ("three_shards", 2, 2),  # 3 shards over 4 consumers: shards and episodes cut between workers
    ("one_shard", 8, 3),  # 24 consumers of one shard
])
def test_equal_steps_exactly_once_and_exact_lengths(layout, world_size, num_workers, request):
    """Real DataLoaders: every rank yields exactly the samples its plan names, as many batches as
    len(DataLoader), so the plan-level matrix above holds for what comes out."""
    path = request.getfixturevalue(layout)
    batch = 5
    planned = check_split(path, world_size, num_workers, batch=batch)
    for rank in range(world_size):
        ds = CompiledDataset(str(path), rank=rank, world_size=world_size, episode_pool_size=2, return_uint8=True,
                             batch_size=batch)
        ds.set_epoch(1)
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=num_workers)
        got = [batch_indices(b) for b in loader]
        assert len(got) == len(loader)
        flat = [i for b in got for i in b]
        assert len(flat) == len(ds) and sorted(flat) == planned[rank]


def test_workers_without_data_do_not_stall_or_duplicate(eight_shards):
    # one selected episode, three workers: two of them have nothing to read
    ds = CompiledDataset(str(eight_shards), episodes=[5])
    got = [i for b in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=3) for i in batch_indices(b)]
    e = ds.manifest.episode(5)
    assert sorted(got) == list(range(e.from_index, e.to_index))


def test_uneven_split_warns_once(eight_shards, caplog):
    ds = CompiledDataset(str(eight_shards))
    with caplog.at_level(logging.WARNING, logger="roboreel.reader.dataset"):
        for _ in range(2):
            list(ds)  # one consumer: 8 shards divide 1, no warning
        assert not caplog.records
        three = CompiledDataset(str(eight_shards), rank=0, world_size=3)
        list(three)
        list(three)
    assert len([r for r in caplog.records if "do not divide" in r.getMessage()]) == 1


def test_order_is_deterministic_and_reshuffles_per_epoch(eight_shards):
    a = epoch_indices(eight_shards, num_workers=2, epoch=0, seed=4)
    assert a == epoch_indices(eight_shards, num_workers=2, epoch=0, seed=4)
    assert a != epoch_indices(eight_shards, num_workers=2, epoch=1, seed=4)
    assert a != epoch_indices(eight_shards, num_workers=2, epoch=0, seed=5)
    # the same object, iterated twice without set_epoch, moves on to the next epoch by itself
    ds = CompiledDataset(str(eight_shards), episode_pool_size=2, seed=4, return_uint8=True)
    first, second = [int(s["index"]) for s in ds], [int(s["index"]) for s in ds]
    assert first != second and sorted(first) == sorted(second)


def test_batches_mix_episodes(tmp_path_factory):
    """With P pooled episodes a batch of B holds ~P(1 - (1 - 1/P)^B) distinct episodes under uniform picks;
    allow 80% of that for the epoch's tail (the pool draining); file order holds 1-2. Read undecoded
    (``iter_pending``: the same stream as ``iter()``), as order is the plan's alone."""
    _, path = compiled_pair(tmp_path_factory, episodes_per_shard=3, episodes=24, min_length=10, max_length=60,
                            seed=3)
    pool, batch = 8, 16

    def distinct(ds: CompiledDataset) -> list[int]:
        episodes = [p.episode for p in ds.iter_pending()]
        assert len(episodes) == ds.num_frames
        return [len(set(episodes[i:i + batch])) for i in range(0, len(episodes), batch)]

    mixed = distinct(CompiledDataset(str(path), episode_pool_size=pool))
    ideal = pool * (1 - (1 - 1 / pool) ** batch)
    assert np.mean(mixed) >= 0.8 * ideal, (np.mean(mixed), ideal)
    plain = distinct(CompiledDataset(str(path), shuffle=False))
    assert np.mean(plain) < 2.5 < np.mean(mixed)


def test_stats_aggregate_across_workers(eight_shards):
    # frame_order="segments": one decoder a clip (the default opens one per run lane: plan/_shuffled.py)
    ds = CompiledDataset(str(eight_shards), episode_pool_size=2, frame_order="segments")
    m = ds.manifest
    n = len([i for b in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2) for i in batch_indices(b)])
    st = ds.stats()
    cams = len(m.cameras)
    assert st["samples"] == n == m.total_frames and st["dropped_samples"] == 0
    # the split may cut an episode (and a shard) between the two workers: both read it
    plans = [ds._slices(World(0, 1, w, 2), 0) for w in range(2)]
    reads = sum(len(s.episodes) for p in plans for s in p)
    assert len(m.episodes) <= reads <= len(m.episodes) + 1
    assert st["episodes_read"] == reads
    assert st["decoder_opens"] == reads * cams
    assert st["decoder_opens"] + st["decoder_reuses"] == st["decode_calls"]
    assert st["frames_decoded"] == n * cams
    assert 0 < st["bytes_read"] <= sum(s.size for s in m.shards) * 2
    assert st["requests"] == sum(len(p) for p in plans) and st["retries"] == 0
    assert st["decode_seconds"] > 0 and st["fetch_seconds"] > 0
    ds.reset_stats()
    assert ds.stats()["samples"] == 0


def test_persistent_workers_follow_the_epochs(eight_shards):
    """Persistent workers keep their dataset copies; each new iteration moves them to the next epoch, which is
    what set_epoch(0), set_epoch(1), ... in the main process asks for."""
    ds = CompiledDataset(str(eight_shards), episode_pool_size=2, return_uint8=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2, persistent_workers=True)
    for epoch in range(3):
        ds.set_epoch(epoch)
        assert [batch_indices(b) for b in loader] == epoch_indices(eight_shards, num_workers=2, epoch=epoch)
