"""Collation of pending batches (reader/decode/_deferred.py): a batch's values gathered a column and an episode at a
time equal collating each sample's own values, and ``collate_values`` stacks like ``np.stack`` and
``default_collate``: keys, order, dtypes, shapes and values, over whole epochs with and without windows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.datasets import compiled_pair

from roboreel.reader import CompiledDataset
from roboreel.reader.decode._deferred import collate_pending
from roboreel.reader.loader._loader import _PendingStream

WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.1, -0.05, 0.0],
           "observation.images.wrist": [0.0, 0.05]}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes of 12-30 frames, 2 cameras), 2 episodes per shard."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


def _make(path, **kw):
    ds = CompiledDataset(str(path), episode_pool_size=3, seed=7, **kw)
    ds.set_epoch(1)
    return ds


@pytest.mark.parametrize("windows", [None, WINDOWS], ids=["single", "windows"])
def test_worker_collate_equals_default_collate_of_the_samples_values(compiled, windows):
    """Workers stack numeric values with numpy (no shared-memory file per tensor): every key's dtype, shape and
    values equal ``default_collate`` of the same samples' values as tensors; strings stay lists."""
    from torch.utils.data import default_collate

    from roboreel.reader.decode._clips import value_tensors
    from roboreel.reader.decode._deferred import collate_values

    ds = _make(compiled, delta_timestamps=windows)
    pending = [p for p, _ in _PendingStream(ds)][:7]
    got = collate_values([p.sample_values() for p in pending])
    want = default_collate([value_tensors(p.sample_values()) for p in pending])
    assert list(got) == list(want) and "task" in got and isinstance(got["task"], list)
    for k, w in want.items():
        if isinstance(w, torch.Tensor):
            assert got[k].dtype == w.dtype and got[k].shape == w.shape and torch.equal(got[k], w), k
        else:
            assert got[k] == w, k


@pytest.mark.parametrize("windows", [None, WINDOWS], ids=["plain", "windows"])
def test_batches_gather_rows_per_episode_as_samples_would(compiled, windows):
    """A batch's values are gathered a column and an episode at a time (``LoadedEpisode.gather``), not sample by
    sample: over two whole epochs with batches of 5 (several episodes each, windows clamped at episode edges), the
    same keys, order, dtypes and values as collating each sample's own values."""
    from roboreel.reader.decode._deferred import collate_values

    ds = _make(compiled, delta_timestamps=windows)
    batches = 0
    for epoch in (1, 2):
        ds.set_epoch(epoch)
        pending = [p for p, _ in _PendingStream(ds)]
        for i in range(0, len(pending), 5):
            chunk = pending[i:i + 5]
            assert all(p.values is None and p.rows is not None for p in chunk)
            got = collate_pending(chunk).values
            want = collate_values([p.rows.source.values(p.rows.frame) for p in chunk])
            assert list(got) == list(want)
            for k, w in want.items():
                if isinstance(w, torch.Tensor):
                    assert got[k].dtype == w.dtype and torch.equal(got[k], w), k
                else:
                    assert got[k] == w, k
            batches += len({p.episode for p in chunk}) > 1
    assert batches > 0  # batches mixing episodes were among them


def test_a_pending_sample_without_values_or_rows_fails_its_batch(compiled):
    """A sample that carries neither values nor a row to gather them from stops the batch with an error naming it,
    instead of leaving the batch one row short."""
    ds = _make(compiled)
    pending = [p for p, _ in _PendingStream(ds)][:4]
    pending[2].rows = None
    with pytest.raises(ValueError, match=f"episode {pending[2].episode} frame {pending[2].frame} has no values"):
        collate_pending(pending)


def test_collated_values_stack_like_np_stack():
    """collate_values stacks numeric arrays with ``np.array`` of their list: the dtype, shape and values of
    ``np.stack`` for equal arrays, promoted dtypes alike for mixed ones (a mixture's members), and np.stack's own
    error for shapes that differ (never a ragged object array)."""
    from roboreel.reader.decode._deferred import collate_values

    rng = np.random.default_rng(0)
    for shape in ((), (14,), (3, 2)):
        for dtype in (np.bool_, np.uint8, np.int16, np.int64, np.float16, np.float32, np.float64):
            column = [rng.integers(0, 2, shape).astype(dtype) for _ in range(5)]
            got = collate_values([{"x": a} for a in column])["x"]
            want = torch.from_numpy(np.stack(column))
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), (shape, dtype)
    mixed = [np.array(1, dtype=np.int64), np.array(0.5, dtype=np.float32)]
    got = collate_values([{"x": a} for a in mixed])["x"]
    assert got.dtype == torch.from_numpy(np.stack(mixed)).dtype == torch.float64 and got.tolist() == [1.0, 0.5]
    with pytest.raises(ValueError, match="same shape"):
        collate_values([{"x": np.zeros(3, np.float32)}, {"x": np.zeros(4, np.float32)}])


def test_per_sample_values_equal_gathered_ones_with_pending_masks(compiled):
    """On the per-sample path (episodes with image features, mixtures' members) ``pending`` hands its windowed
    cameras' padding masks to ``values``: over a whole epoch every sample's values equal those computed afresh from
    its row, and the camera masks are True exactly where the window left the episode."""
    ds = _make(compiled, delta_timestamps=WINDOWS)
    samples = [p for p, _ in _PendingStream(ds)]
    edges = 0
    for p in samples:
        ep = p.rows.source
        ep.batched = False  # what an episode with image features does
        try:
            got = ep.pending(p.frame, last=False).values
        finally:
            ep.batched = True
        want = ep.values(p.frame)
        assert list(got) == list(want)
        for k, w in want.items():
            assert np.array_equal(got[k], w) if isinstance(w, np.ndarray) else got[k] == w, k
        for cam in ("observation.images.top", "observation.images.wrist"):
            off = ep.windows[cam]
            raw = p.frame + off
            assert got[f"{cam}_is_pad"].tolist() == ((raw < 0) | (raw >= ep.length)).tolist()
            edges += bool(got[f"{cam}_is_pad"].any())
    assert len(samples) == len(ds) and edges > 0
