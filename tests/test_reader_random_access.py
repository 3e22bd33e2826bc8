"""``CompiledDataset[i]``: map-style access equals the stream's sample bit for bit and the reference's by pixel code,
in any order, with windows, a selection, uint8 and transforms; bad indices fail clearly."""

from __future__ import annotations

import pickle
import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from support.datasets import assert_same_sample, compiled_pair

from roboreel.bench.reference import ReferenceDataset
from roboreel.reader import CompiledDataset

CAMERAS = ["observation.images.top", "observation.images.wrist"]
WINDOWS = {"action": [-0.2, 0.0, 0.1], "observation.images.top": [-0.1, 0.0], "observation.images.wrist": [0.0]}
MEDIUM = {"episodes": 12, "min_length": 10, "max_length": 40, "seed": 5}


@pytest.fixture(scope="module")
def medium(tmp_path_factory):
    return compiled_pair(tmp_path_factory, episodes_per_shard=3, **MEDIUM)


def _bit_equal(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w), (k, int(want["index"]))
        else:
            assert g == w, k


@pytest.mark.parametrize("windows", [None, WINDOWS], ids=["plain", "windows"])
def test_every_index_in_any_order_is_the_streams_sample(medium, windows):
    source, compiled = medium
    ds = CompiledDataset(str(compiled), shuffle=False, delta_timestamps=windows)
    stream = list(CompiledDataset(str(compiled), shuffle=False, delta_timestamps=windows))
    ref = ReferenceDataset(str(source), delta_timestamps=windows)
    assert ds.num_frames == len(stream) == len(ref)
    order = list(range(len(stream)))
    random.Random(1).shuffle(order)
    for i in list(range(len(stream))) + order:  # forward (decoders move on), then jumps (seeks, episodes re-read)
        got = ds[i]
        _bit_equal(got, stream[i])
        assert int(got["index"]) == i
    for i in order[:40]:
        assert_same_sample(ds[i], ref[i], CAMERAS)  # pixel codes against the source's own decode


def test_a_selection_is_indexed_in_file_order_with_uint8_and_transforms(medium):
    source, compiled = medium
    episodes = [7, 2, 9]  # given unsorted: LeRobotDataset still reads them in file order
    flip = lambda x: x.flip(-1)  # noqa: E731
    kw = dict(episodes=episodes, return_uint8=True, image_transforms=flip, delta_timestamps=WINDOWS)
    ds = CompiledDataset(str(compiled), **kw)
    stream = list(CompiledDataset(str(compiled), shuffle=False, **kw))
    assert sorted({int(s["episode_index"]) for s in stream}) == sorted(episodes)
    assert [int(s["episode_index"]) for s in stream] == sorted(int(s["episode_index"]) for s in stream)
    assert ds.num_frames == len(stream)
    for i in reversed(range(len(stream))):
        _bit_equal(ds[i], stream[i])
    assert ds[0]["observation.images.top"].dtype == torch.uint8
    _bit_equal(ds[-1], stream[-1])


def test_bad_indices_fail_clearly_and_the_dataset_still_pickles_and_streams(medium):
    _, compiled = medium
    ds = CompiledDataset(str(compiled), shuffle=False)
    n = ds.num_frames
    for bad in (n, -n - 1):
        with pytest.raises(IndexError, match=f"out of range: the dataset has {n} frames"):
            ds[bad]
    for bad in (1.0, slice(0, 2), "3"):
        with pytest.raises(TypeError, match="indexed by an integer"):
            ds[bad]
    _bit_equal(ds[np.int64(3)], ds[torch.tensor(3)])
    ds[5]  # decoders open in this process: they do not travel with the dataset
    copy = pickle.loads(pickle.dumps(ds))
    _bit_equal(copy[5], ds[5])
    batches = list(torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2))
    assert sorted(int(i) for b in batches for i in b["index"]) == list(range(n))


def test_lerobot_dataset_members_a_script_may_read(medium):
    """``features``, ``depth_output_unit``, ``set_image_transforms`` / ``clear_image_transforms``, as on
    LeRobotDataset: a transform set later applies to the next reads, and clearing it gives the frames back."""
    _, compiled = medium
    ds = CompiledDataset(str(compiled), shuffle=False)
    assert ds.features == ds.meta.features and list(ds.features)[:2] == CAMERAS
    assert ds.depth_output_unit == "mm"
    plain = ds[11]
    ds.set_image_transforms(lambda x: x.flip(-1))
    flipped = ds[11]
    assert torch.equal(flipped[CAMERAS[0]], plain[CAMERAS[0]].flip(-1))
    assert torch.equal(next(iter(ds))[CAMERAS[1]], ds[0][CAMERAS[1]])  # the stream applies it too
    ds.clear_image_transforms()
    _bit_equal(ds[11], plain)
    with pytest.raises(ValueError, match="callable"):
        ds.set_image_transforms("flip")


def test_threads_take_turns(medium):
    """Two threads indexing one dataset (its decoders are stateful): every sample still the stream's."""
    _, compiled = medium
    ds = CompiledDataset(str(compiled), shuffle=False, delta_timestamps=WINDOWS)
    stream = list(CompiledDataset(str(compiled), shuffle=False, delta_timestamps=WINDOWS))
    order = list(range(len(stream)))
    random.Random(2).shuffle(order)
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(ds.__getitem__, order))
    for i, sample in zip(order, got, strict=True):
        _bit_equal(sample, stream[i])
