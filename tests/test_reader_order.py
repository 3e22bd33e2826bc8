"""Sample order figures (reader/order.py): the uniform expectation against an enumeration of every batch a
RandomSampler can draw, the near-duplicate border on LeRobot's float32 timestamps, and ``roboreel.loader``'s
``stats()["order"]`` against the batches it really returned."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from support.datasets import compiled_pair

import roboreel
from roboreel.reader import CompiledDataset
from roboreel.reader.order import batch_order, near_offsets, uniform_order

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.mark.parametrize(("lengths", "fps", "batch"), [([4, 3, 2], 10, 3), ([5, 1, 3], 15, 4), ([6], 50, 2)])
def test_uniform_order_is_the_mean_over_every_possible_batch(lengths, fps, batch):
    frames = [(e, f) for e, n in enumerate(lengths) for f in range(n)]
    seen = [batch_order([frames[i][0] for i in c], [np.float32(frames[i][1] / fps) for i in c])
            for c in itertools.combinations(range(len(frames)), batch)]
    distinct, pairs = uniform_order(lengths, fps=fps, batch_size=batch)
    assert distinct == pytest.approx(np.mean([d for d, _ in seen]), abs=1e-12)
    assert pairs == pytest.approx(np.mean([p for _, p in seen]), abs=1e-12)


@pytest.mark.parametrize("fps", [15, 30, 50])
def test_near_means_under_0_2_s_on_float32_timestamps(fps):
    """Frames exactly 0.2 s apart are not near, one frame closer is, wherever the pair sits in the episode."""
    ts = (np.arange(300) / fps).astype(np.float32)
    d = near_offsets(fps)
    assert d / fps < 0.2 <= (d + 1) / fps
    for i in range(0, 300 - d - 1, 7):
        assert batch_order([0, 0], [ts[i], ts[i + d]]) == (1, 1)
        assert batch_order([0, 0], [ts[i], ts[i + d + 1]]) == (1, 0)
        assert batch_order([0, 1], [ts[i], ts[i]]) == (2, 0)  # another episode's frame is never near


def test_batch_order_counts_every_pair_within_an_episode():
    # episode 3: frames at 0, 0.1, 0.15 s (3 pairs under 0.2 s), 0.5 s (none); episode 4: two at 1.0 s
    assert batch_order([3, 4, 3, 3, 4, 3], [0.0, 1.0, 0.1, 0.5, 1.0, 0.15]) == (2, 4)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes of 12-30 frames, 2 cameras), 2 episodes per shard."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_stats_order_is_what_its_batches_hold(compiled, num_workers):
    ds = CompiledDataset(str(compiled), episode_pool_size=3, seed=5)
    loader = roboreel.loader(ds, batch_size=8, num_workers=num_workers)
    loader.set_epoch(0)
    figures = [batch_order(b["episode_index"].numpy(), b["timestamp"].numpy()) for b in loader]
    order = loader.stats()["order"]
    assert order["batches"] == len(figures) == len(loader)
    assert order["distinct_episodes_per_batch"] == pytest.approx(np.mean([d for d, _ in figures]))
    assert order["near_duplicate_pairs_per_batch"] == pytest.approx(np.mean([p for _, p in figures]))
    sizes = [8] * (ds.num_frames // 8) + ([ds.num_frames % 8] if ds.num_frames % 8 and num_workers == 0 else [])
    lengths = ds.episode_lengths()
    assert lengths.sum() == ds.num_frames and len(lengths) == ds.num_episodes
    if num_workers == 0:  # one stream: full batches and one short one at the end
        want = np.mean([uniform_order(lengths, fps=ds.fps, batch_size=b) for b in sizes], axis=0)
        assert order["uniform_distinct_episodes_per_batch"] == pytest.approx(want[0])
        assert order["uniform_near_duplicate_pairs_per_batch"] == pytest.approx(want[1])
    # the default order serves GOP runs of a few pooled episodes: fewer episodes a batch than uniform sampling
    assert order["distinct_episodes_per_batch"] < order["uniform_distinct_episodes_per_batch"]
