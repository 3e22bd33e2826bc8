"""Mixtures of robots: members with other camera names, state/action sizes, cameras and fps, made canonical.

A: 20 fps, cameras top + wrist, state 6, action 6. B: 10 fps, one camera "front" (remapped onto A's top), no
wrist, state 4, action 3. Every mixture sample's values equal B's or A's own sample read alone (its own keys,
unpadded), padding and masks are exact, windows in frames are taken on each member's grid, and what cannot be
made alike fails with a message naming the member."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest
import torch
from support.datasets import compiled_pair
from support.resume import check_resume

import roboreel
from roboreel.formats.merge import MixtureMismatch
from roboreel.reader import CompiledDataset

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")
TOP, WRIST, FRONT = "observation.images.top", "observation.images.wrist", "observation.images.front"
STATE = "observation.state"
REMAP = [None, {FRONT: TOP}]
WINDOW = {"action": [0, 1, 2, 3], STATE: [-1, 0]}
B = {"episodes": 4, "fps": 10, "cameras": (FRONT,), "state_dim": 4, "action_dim": 3, "seed": 5,
     "min_length": 10, "max_length": 16}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    _, a = compiled_pair(tmp_path_factory, episodes_per_shard=2)
    _, b = compiled_pair(tmp_path_factory, episodes_per_shard=1, **B)
    return str(a), str(b)


def _mix(pair, **kw):
    kw = {"remap": REMAP, "pad": "max", "delta_indices": WINDOW, "episode_pool_size": 3, "seed": 3, **kw}
    return CompiledDataset(list(pair), **kw)


def _alone(path, remap=None, **kw):
    """Every sample of one member read alone, by index, windows in its own keys."""
    own = {v: k for k, v in (remap or {}).items()}
    windows = {own.get(k, k): v for k, v in WINDOW.items()}
    return {int(s["index"]): s for s in CompiledDataset(path, delta_indices=windows, shuffle=False, **kw)}


def _check_member_values(samples, pair, **kw):
    """Each mixture sample against its member's own sample: renamed keys, unpadded values equal, padding 0."""
    alone = [_alone(pair[0], **kw), _alone(pair[1], REMAP[1], **kw)]
    sizes = {STATE: (6, 4), "action": (6, 3)}
    for s in samples:
        k = int(s["dataset_index"])
        want = alone[k][int(s["index"])]
        for key in ("index", "episode_index", "frame_index", "timestamp", f"{STATE}_is_pad", "action_is_pad"):
            assert torch.equal(s[key], want[key]), key
        for key, dims in sizes.items():
            d = dims[k]
            assert s[key].shape[-1] == 6 and torch.equal(s[key][..., :d], want[key]), key
            assert not s[key][..., d:].any(), key
            assert s[f"{key}_dim_is_pad"].tolist() == [i >= d for i in range(6)], key
        own_top = TOP if k == 0 else FRONT
        assert torch.equal(s[TOP], want[own_top])
        assert bool(s[f"{WRIST}_is_missing"]) == (k == 1) and s[f"{WRIST}_is_missing"].dtype == torch.bool
        if k == 0:
            assert torch.equal(s[WRIST], want[WRIST])
        else:
            assert s[WRIST].shape == (3, 64, 64) and s[WRIST].dtype == torch.float32 and not s[WRIST].any()
            assert f"{WRIST}_is_pad" not in s
        assert FRONT not in s and s["task"] == want["task"]


def test_every_sample_is_its_members_own_canonicalised(pair):
    ds = _mix(pair, weights=[0.5, 0.5], samples_per_epoch=160)
    samples = list(ds)
    assert len(samples) == 160
    _check_member_values(samples, pair)
    keys = [list(s) for s in samples]
    assert all(k == keys[0] for k in keys)  # one key order: batches stack
    assert keys[0][:2] == [TOP, WRIST]
    batch = next(iter(torch.utils.data.DataLoader(_mix(pair, weights=[0.5, 0.5], samples_per_epoch=32),
                                                  batch_size=16)))
    assert batch["action"].shape == (16, 4, 6) and batch[TOP].shape == (16, 3, 64, 64)
    assert sorted(set(batch["dataset_index"].tolist())) == [0, 1]


def test_windows_in_frames_follow_each_members_fps(pair):
    """delta_indices are frames of each member's own grid: B's window at 10 fps spans twice A's seconds, and
    equals B's window in seconds (0.1 s a frame) read alone."""
    b = list(CompiledDataset(pair[1], delta_timestamps={"action": [0.0, 0.1, 0.2, 0.3]}, shuffle=False))
    by_index = {int(s["index"]): s for s in b}
    ds = _mix(pair, weights=[0.5, 0.5], samples_per_epoch=80)
    for s in ds:
        if int(s["dataset_index"]) == 1:
            w = by_index[int(s["index"])]
            assert torch.equal(s["action"][:, :3], w["action"]) and torch.equal(s["action_is_pad"], w["action_is_pad"])
    assert ds.member_fps == [20, 10]
    assert [m.delta_timestamps["action"] for m in ds.members] == [[0.0, 0.05, 0.1, 0.15], [0.0, 0.1, 0.2, 0.3]]


def test_delta_timestamps_off_a_members_grid_name_it(pair):
    with pytest.raises(ValueError, match=r"koch|fps") as e:
        _mix(pair, delta_indices=None, delta_timestamps={"action": [0.0, 0.05]})
    assert pair[1] in str(e.value) and "10 fps" in str(e.value)
    ds = _mix(pair, delta_indices=None, delta_timestamps={"action": [0.0, 0.1]})
    assert [m.windows["action"].tolist() for m in ds.members] == [[0, 2], [0, 1]]


def test_missing_camera_window_is_zeros_and_padded(pair):
    ds = _mix(pair, delta_indices={WRIST: [-1, 0], "action": [0]}, weights=[0.5, 0.5], samples_per_epoch=40,
              return_uint8=True, image_transforms=lambda x: x[..., :32, :32])
    seen = set()
    for s in ds:
        k = int(s["dataset_index"])
        seen.add(k)
        assert s[WRIST].shape == (2, 3, 32, 32) and s[WRIST].dtype == torch.uint8 and list(s)[:2] == [TOP, WRIST]
        if k == 1:
            assert not s[WRIST].any() and s[f"{WRIST}_is_pad"].all()
    assert seen == {0, 1}


def test_errors_name_the_member_and_the_fix(pair, tmp_path_factory):
    a, b = pair
    with pytest.raises(MixtureMismatch, match="does not have") as e:
        _mix(pair, remap=[None, {"observation.images.side": TOP}])
    assert b in str(e.value) and "observation.images.side" in str(e.value)
    _, big = compiled_pair(tmp_path_factory, episodes_per_shard=2, episodes=2, height=72, cameras=(FRONT,))
    with pytest.raises(MixtureMismatch, match="--resize") as e:
        CompiledDataset([a, str(big)], remap=REMAP, pad="max")
    assert a in str(e.value) and str(big) in str(e.value)
    with pytest.raises(MixtureMismatch, match="pad='max'"):
        CompiledDataset([a, b], remap=REMAP)
    with pytest.raises(ValueError, match="mix several datasets"):
        CompiledDataset(a, remap=REMAP)
    with pytest.raises(ValueError, match="one dict"):
        CompiledDataset([a, b], remap=[None], pad="max")


@pytest.mark.parametrize("remap", [REMAP, [{WRIST: None}, {FRONT: TOP}]], ids=["missing-camera", "dropped"])
def test_loader_batches_equal_the_dataloader(pair, remap):
    """roboreel.loader decodes the renamed cameras and the missing camera's blank frame in its stage: the same
    batches as the DataLoader, bit for bit (zeros included), with a windowed missing camera too."""
    def make():
        return _mix(pair, remap=remap, weights=[0.5, 0.5], samples_per_epoch=48,
                    delta_indices={**WINDOW, WRIST: [-1, 0]} if remap is REMAP else WINDOW)
    want = list(torch.utils.data.DataLoader(make(), batch_size=8, num_workers=2))
    got = list(roboreel.loader(make(), mix_workers=False, batch_size=8, num_workers=2))
    assert len(got) == len(want) == 6
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w)
        for k in w:
            assert torch.equal(g[k], w[k]) if isinstance(w[k], torch.Tensor) else g[k] == w[k], k
    assert (WRIST in want[0]) == (remap is REMAP)
    if remap is REMAP:
        lacking = torch.cat([b[f"{WRIST}_is_missing"] for b in got])
        assert lacking.any() and not torch.cat([b[WRIST] for b in got])[lacking].any()
        assert torch.cat([b[f"{WRIST}_is_pad"] for b in got])[lacking].all()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_and_equal_steps(pair, num_workers):
    def make():
        ds = _mix(pair, weights=[0.3, 0.7], samples_per_epoch=90)
        ds.set_epoch(1)
        return ds

    check_resume(make, [2, 7], batch_size=6, num_workers=num_workers)
    steps = [len(list(torch.utils.data.DataLoader(
        _mix(pair, weights=[0.5, 0.5], samples_per_epoch=101, rank=r, world_size=2, batch_size=4),
        batch_size=4, num_workers=num_workers))) for r in range(2)]
    assert steps[0] == steps[1]


def test_shares_and_weights_by_frames(pair):
    """>= 4,000 draws: each member's share within 2 points of its weight; "frames" weighs by frames (Octo)."""
    no_cameras = [{TOP: None, WRIST: None}, {FRONT: None}]  # tabular only: 4,000 samples read quickly
    ds = _mix(pair, weights=[0.4, 0.6], samples_per_epoch=4000, remap=no_cameras)
    counts = collections.Counter(int(s["dataset_index"]) for s in ds)
    assert sum(counts.values()) == 4000 and abs(counts[1] / 4000 - 0.6) <= 0.02
    frames = [m.num_frames for m in ds.members]
    fr = _mix(pair, weights="frames", samples_per_epoch=4000)
    assert np.allclose(fr.plan.weights, frames)
    assert abs(fr.member_samples()[0] / 4000 - frames[0] / sum(frames)) <= 0.001
    with pytest.raises(ValueError, match="frames"):
        _mix(pair, weights="size")


def _frames(path, key):
    return np.stack([s[key].numpy() for s in CompiledDataset(path, shuffle=False)]).astype(np.float64)


def test_stats_pool_only_real_values_and_members_keep_their_own(pair):
    """meta.stats of a padded feature: dims B has pool A's and B's frames, the others A's alone (no padded
    zero counted); a camera B lacks pools A's alone; member_stats are each member's own, under canonical keys."""
    ds = _mix(pair)
    a, b = _frames(pair[0], STATE), _frames(pair[1], STATE)
    st = ds.meta.stats[STATE]
    both = np.concatenate([a[:, :4], b])
    assert np.allclose(st["mean"][:4], both.mean(0)) and np.allclose(st["std"][:4], both.std(0))
    assert np.allclose(st["mean"][4:], a[:, 4:].mean(0)) and np.allclose(st["std"][4:], a[:, 4:].std(0))
    assert np.array_equal(st["min"][:4], both.min(0)) and np.array_equal(st["max"][4:], a[:, 4:].max(0))
    assert int(st["count"][0]) == len(a) + len(b)
    own_a, own_b = (CompiledDataset(p).meta.stats for p in pair)
    assert all(np.array_equal(ds.meta.stats[WRIST][n], own_a[WRIST][n]) for n in ("mean", "std", "min", "max"))
    assert FRONT not in ds.meta.stats and list(ds.meta.features[STATE]["shape"]) == [6]
    mine = ds.meta.member_stats(1)
    assert np.array_equal(mine[TOP]["mean"], own_b[FRONT]["mean"]) and mine[STATE]["mean"].shape == (4,)
    assert np.array_equal(mine["action"]["max"], own_b["action"]["max"])


def test_normalize_with_each_members_own_stats(pair):
    """normalize=: LeRobot's MEAN_STD / MIN_MAX arithmetic with the sample's own member's stats; padding stays 0."""
    plain = {(int(s["dataset_index"]), int(s["index"])): s
             for s in _mix(pair, weights=[0.5, 0.5], samples_per_epoch=60, seed=9)}
    ds = _mix(pair, weights=[0.5, 0.5], samples_per_epoch=60, seed=9,
              normalize={STATE: "mean_std", "action": "min_max"})
    seen = set()
    for s in ds:
        k = int(s["dataset_index"])
        seen.add(k)
        raw, st = plain[k, int(s["index"])], ds.meta.member_stats(k)
        d = st[STATE]["mean"].shape[0]
        mean, std = (torch.tensor(st[STATE][n], dtype=torch.float32) for n in ("mean", "std"))
        assert torch.equal(s[STATE][..., :d], (raw[STATE][..., :d] - mean) / (std + 1e-8))
        lo, hi = (torch.tensor(st["action"][n], dtype=torch.float32) for n in ("min", "max"))
        da = lo.shape[0]
        assert torch.equal(s["action"][..., :da], 2 * (raw["action"][..., :da] - lo) / (hi - lo) - 1)
        assert not s[STATE][..., d:].any() and not s["action"][..., da:].any()
    assert seen == {0, 1}
    with pytest.raises(ValueError, match="not a numeric feature"):
        _mix(pair, normalize={TOP: "mean_std"})


def test_inspect_shows_canonical_features_and_each_members_map(pair, tmp_path, capsys):
    from roboreel.cli import main

    spec = tmp_path / "mix.yaml"
    spec.write_text(f"remap:\n  - null\n  - {{{FRONT}: {TOP}}}\npad: max\n")
    assert main(["inspect", ",".join(pair), "--remap", str(spec), "--weights", "frames", "--json"]) == 0
    mix = json.loads(capsys.readouterr().out)["mixture"]
    assert mix["canonical"][STATE] == {"dtype": "float32", "shape": [6]}
    a, b = mix["maps"]
    assert a["renamed"] == {} and a["padded"] == {} and a["missing"] == [] and a["fps"] == 20
    assert b["renamed"] == {FRONT: TOP} and b["padded"] == {STATE: [4, 6], "action": [3, 6]}
    assert b["missing"] == [WRIST] and b["fps"] == 10
    assert main(["inspect", ",".join(pair), "--remap", str(spec)]) == 0
    text = capsys.readouterr().out
    assert f"    {FRONT} -> {TOP}\n" in text and f"    {WRIST}: missing (zeros, {WRIST}_is_missing)\n" in text
    assert "    observation.state: 4 -> 6 (zero-padded, observation.state_dim_is_pad)\n" in text


def test_delta_indices_of_one_dataset_are_checked(pair):
    a = pair[0]
    with pytest.raises(ValueError, match="not both"):
        CompiledDataset(a, delta_indices={"action": [0]}, delta_timestamps={"action": [0.0]})
    with pytest.raises(ValueError, match="integer frame offsets"):
        CompiledDataset(a, delta_indices={"action": [0.5]})
    with pytest.raises(ValueError, match="not a feature"):
        CompiledDataset(a, delta_indices={"actions": [0]})
    ds = CompiledDataset(a, delta_indices={"action": [-2, 0, 3]})
    assert ds.windows["action"].tolist() == [-2, 0, 3] and ds.delta_timestamps == {"action": [-0.1, 0.0, 0.15]}
