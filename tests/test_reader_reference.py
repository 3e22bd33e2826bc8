"""The reference reader (the oracle) against ground truth: pixel codes and exact synthetic rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.datasets import codes

from roboreel.bench.reference import ReferenceDataset
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.synth.content import action_row, state_row


def flip(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-1)


def test_every_frame_is_the_frame_asked_for(small_source):
    src = LeRobotSource(str(small_source))
    ref = ReferenceDataset(str(small_source))
    assert len(ref) == sum(e.length for e in src.episodes)
    samples = ref.__getitems__(list(range(len(ref))))
    ep_of = {i: e for e in src.episodes for i in range(e.from_index, e.to_index)}
    for i, s in enumerate(samples):
        e = ep_of[i]
        assert int(s["index"]) == i and int(s["episode_index"]) == e.index and int(s["frame_index"]) == i - e.from_index
        for cam_id, cam in enumerate(src.camera_keys):
            assert s[cam].shape == (3, 64, 64) and s[cam].dtype == torch.float32
            assert float(s[cam].min()) >= 0.0 and float(s[cam].max()) <= 1.0
            assert codes(s[cam]) == [(i, e.index, cam_id)]
        assert torch.equal(s["observation.state"], torch.from_numpy(state_row(i, 6)))
        assert torch.equal(s["action"], torch.from_numpy(action_row(i, 6)))
        assert s["timestamp"].shape == () and s["timestamp"].dtype == torch.float32
        assert s["index"].shape == () and s["index"].dtype == torch.int64
        assert s["task"] == src.tasks[int(s["task_index"])]
    # one sample at a time gives the same as a batch
    one = ref[17]
    assert all(torch.equal(one[k], samples[17][k]) for k in one if isinstance(one[k], torch.Tensor))


def test_windows_cross_both_episode_ends(small_source):
    src = LeRobotSource(str(small_source))
    e = src.episodes[2]
    ref = ReferenceDataset(str(small_source), delta_timestamps={
        "action": [-0.1, 0.0, 0.1], "observation.images.top": [-0.05, 0.0, 0.05], "observation.images.wrist": [0.0]})
    first, last = ref[e.from_index], ref[e.to_index - 1]
    assert first["action_is_pad"].tolist() == [True, False, False]
    assert torch.equal(first["action"], torch.from_numpy(np.stack([action_row(i, 6) for i in
                                                                   (e.from_index, e.from_index, e.from_index + 2)])))
    assert last["action_is_pad"].tolist() == [False, False, True]
    assert codes(first["observation.images.top"]) == [(e.from_index, e.index, 0), (e.from_index, e.index, 0),
                                                      (e.from_index + 1, e.index, 0)]
    assert first["observation.images.top"].shape == (3, 3, 64, 64)
    assert first["observation.images.top_is_pad"].tolist() == [True, False, False]
    # a one-offset camera window is squeezed to [C, H, W], as LeRobot's decoder path does
    assert first["observation.images.wrist"].shape == (3, 64, 64)
    assert first["observation.images.wrist_is_pad"].tolist() == [False]
    assert list(first)[-1] == "task" and list(first)[:2] == ["observation.images.top", "observation.images.wrist"]


def test_episode_selection_transforms_and_uint8(small_source):
    src = LeRobotSource(str(small_source))
    chosen = [src.episodes[1], src.episodes[5]]
    ref = ReferenceDataset(str(small_source), episodes=[5, 1], return_uint8=True, image_transforms=flip)
    assert len(ref) == sum(e.length for e in chosen)
    got = [int(s["index"]) for s in ref.__getitems__(list(range(len(ref))))]
    assert got == [i for e in chosen for i in range(e.from_index, e.to_index)]
    s = ref[0]
    assert s["observation.images.top"].dtype == torch.uint8
    assert codes(s["observation.images.top"].flip(-1)) == [(chosen[0].from_index, chosen[0].index, 0)]
    with pytest.raises(IndexError):
        ref[len(ref)]
    with pytest.raises(ValueError, match="not in"):
        ReferenceDataset(str(small_source), episodes=[99])


def test_works_in_dataloader_workers(small_source):
    ref = ReferenceDataset(str(small_source))
    loader = torch.utils.data.DataLoader(ref, batch_size=16, num_workers=2, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    seen = sorted(int(i) for b in loader for i in b["index"])
    assert seen == list(range(len(ref)))
