"""``roboreel.loader(..., mix_workers=True)`` (reader/decode/_mixing.py): every batch takes ``batch_size /
num_workers`` samples from each worker, so it mixes the episodes of all workers. Its batches are exactly the
unmixed loader's batches of that smaller size, ``num_workers`` consecutive ones joined (frames identified by pixel
codes, every tensor bit for bit); each index comes once an epoch; ``len`` is exact; a resume mid-epoch continues
exactly; and a batch holds more episodes than one worker's batch does."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from support.datasets import batch_indices, compiled_pair
from support.resume import assert_same_batches

import roboreel
from roboreel.reader import CompiledDataset
from roboreel.reader.order import batch_order
from roboreel.synth import read

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
CAMERAS = ["observation.images.top", "observation.images.wrist"]
WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.05, 0.0]}
B, W = 8, 2


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes of 12-30 frames, 2 cameras), 2 episodes per shard."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


def _ds(compiled, epoch=1, **kw):
    ds = CompiledDataset(str(compiled), episode_pool_size=2, seed=3, delta_timestamps=WINDOWS, return_uint8=True,
                         **kw)
    ds.set_epoch(epoch)
    return ds


def _epoch(loader) -> list[dict]:
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]


def _joined(batches: list[dict], k: int) -> list[dict]:
    out = []
    for i in range(0, len(batches), k):
        group = batches[i:i + k]
        out.append({key: torch.cat([g[key] for g in group]) if isinstance(group[0][key], torch.Tensor)
                    else [v for g in group for v in g[key]] for key in group[0]})
    return out


def test_mixed_batches_are_the_workers_batches_joined(compiled):
    # a mixing loader sets an unset spread to B / W (its workers' share); the unmixed one is given the same
    mixed = roboreel.loader(_ds(compiled), batch_size=B, num_workers=W, mix_workers=True)
    plain = roboreel.loader(_ds(compiled, spread=B // W), batch_size=B // W, num_workers=W, mix_workers=False)
    got, parts = _epoch(mixed), _epoch(plain)
    assert len(got) == len(mixed) == -(-len(plain) // W)
    assert_same_batches(got, _joined(parts, W))
    indices = [i for b in got for i in batch_indices(b)]
    assert sorted(indices) == list(range(_ds(compiled).num_frames))  # every frame once
    for b in got:  # the frames are the ones the samples name
        for cam in CAMERAS:
            frames = b[cam] if b[cam].ndim == 4 else b[cam][:, -1]
            assert [read(f).index for f in frames] == batch_indices(b)
    # one batch, every worker's episodes: more of them than a batch from one worker holds
    unmixed = _epoch(roboreel.loader(_ds(compiled), batch_size=B, num_workers=W, mix_workers=False))
    mean = [np.mean([batch_order(b["episode_index"], b["timestamp"])[0] for b in bs]) for bs in (got, unmixed)]
    assert mean[0] > mean[1], mean


@pytest.mark.parametrize("k", [1, 3])
def test_a_mixed_loader_resumes_mid_epoch_exactly(compiled, k):
    whole = _epoch(roboreel.loader(_ds(compiled), batch_size=B, num_workers=W, mix_workers=True))
    first = roboreel.loader(_ds(compiled), batch_size=B, num_workers=W, mix_workers=True)
    it = iter(first)
    before = [{key: v.clone() if isinstance(v, torch.Tensor) else v for key, v in next(it).items()} for _ in range(k)]
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    again = roboreel.loader(_ds(compiled), batch_size=B, num_workers=W, mix_workers=True)
    again.load_state_dict(state)
    assert_same_batches(before + _epoch(again), whole)
    with pytest.raises(ValueError, match="mix_workers"):  # its batches count DataLoader batches of B / W
        roboreel.loader(_ds(compiled), batch_size=B, num_workers=W, mix_workers=False).load_state_dict(state)


def test_mix_workers_needs_a_batch_each_worker_can_fill_and_is_the_default_where_it_can(compiled):
    with pytest.raises(ValueError, match="batch_size divisible by num_workers"):
        roboreel.loader(_ds(compiled), batch_size=7, num_workers=2, mix_workers=True)
    with pytest.raises(ValueError, match="drop_last=False"):
        roboreel.loader(_ds(compiled), batch_size=8, num_workers=2, mix_workers=True, drop_last=True)
    # without workers (or with one) there is nothing to mix: the plain loader
    one = roboreel.loader(_ds(compiled), batch_size=B, num_workers=0, mix_workers=True)
    assert one.mix == 1 and one.dataloader.batch_size == B
    # the default mixes where it can, and batches as a DataLoader does where it cannot
    assert roboreel.loader(_ds(compiled), batch_size=B, num_workers=W).mix == W
    assert roboreel.loader(_ds(compiled), batch_size=7, num_workers=W).mix == 1
    assert roboreel.loader(_ds(compiled), batch_size=B, num_workers=W, drop_last=True).mix == 1


def test_a_mixture_mixes_the_same_way(compiled, tmp_path_factory):
    other = compiled_pair(tmp_path_factory, episodes_per_shard=1, episodes=3, seed=23, min_length=14, max_length=20)[1]

    def mixture(**kw):
        ds = CompiledDataset([str(compiled), str(other)], episode_pool_size=2, seed=3, return_uint8=True, **kw)
        ds.set_epoch(0)
        return ds

    got = _epoch(roboreel.loader(mixture(), batch_size=B, num_workers=W, mix_workers=True))
    parts = _epoch(roboreel.loader(mixture(spread=B // W), batch_size=B // W, num_workers=W, mix_workers=False))
    assert_same_batches(got, _joined(parts, W))
    assert {int(d) for b in got for d in b["dataset_index"]} == {0, 1}
