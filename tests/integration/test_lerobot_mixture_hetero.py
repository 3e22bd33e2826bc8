"""A mixture of two robots written with LeRobot 0.6.1's own API (``LeRobotDataset.create`` / ``add_frame`` /
``save_episode``): A at 10 fps with cameras top + wrist, state/action of 3; B at 15 fps with one camera "front"
(remapped onto A's top) and state/action of 2. Compiled by roboreel and mixed: every sample's tabular values equal
``LeRobotDataset``'s of its member (unpadded), its frames the member's read alone, masks exact, the policy's
windows in frames on each member's grid; and ``roboreel lerobot-train --roboreel.remap=FILE`` trains on it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from lerobot_support import TINY_ACT, run_train  # noqa: E402
from support.settings import FAST

from roboreel.compile import compile_dataset  # noqa: E402
from roboreel.reader import CompiledDataset  # noqa: E402
from roboreel.synth.content import render_frame  # noqa: E402

H, W = 48, 64
TOP, WRIST, FRONT = "observation.images.top", "observation.images.wrist", "observation.images.front"
STATE = "observation.state"
REMAP = [None, {FRONT: TOP}]
CHUNK = [0, 1, 2, 3]


def _write(root: Path, *, fps: int, cameras: tuple[str, ...], dim: int, episodes: int, length: int) -> Path:
    feats = {c: {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]} for c in cameras}
    feats[STATE] = {"dtype": "float32", "shape": (dim,), "names": [f"j{i}" for i in range(dim)]}
    feats["action"] = {"dtype": "float32", "shape": (dim,), "names": [f"j{i}" for i in range(dim)]}
    ds = LeRobotDataset.create(f"local/{root.name}", fps=fps, root=root, features=feats, use_videos=True)
    index = 0
    for ep in range(episodes):
        for k in range(length):
            frame = {c: render_frame(index, ep, i, k, H, W) for i, c in enumerate(cameras)}
            frame[STATE] = (np.arange(dim, dtype=np.float32) + index) / 3
            frame["action"] = -np.arange(dim, dtype=np.float32) * index
            ds.add_frame({**frame, "task": f"{root.name} task {ep % 2}"})
            index += 1
        ds.save_episode()
    ds.finalize()
    return root


@pytest.fixture(scope="module")
def robots(tmp_path_factory):
    base = tmp_path_factory.mktemp("hetero")
    srcs = [_write(base / "arm_a", fps=10, cameras=(TOP, WRIST), dim=3, episodes=3, length=12),
            _write(base / "arm_b", fps=15, cameras=(FRONT,), dim=2, episodes=3, length=14)]
    outs = []
    for src in srcs:
        out = base / f"{src.name}-compiled"
        compile_dataset(str(src), str(out), settings=dataclasses.replace(FAST,
                                                                         episodes_per_shard=2), workers=1)
        outs.append(out)
    return srcs, outs


def test_samples_equal_each_members_own(robots):
    srcs, outs = robots
    mix = CompiledDataset([str(o) for o in outs], remap=REMAP, pad="max", delta_indices={"action": CHUNK},
                          weights=[0.5, 0.5], samples_per_epoch=60, seed=4)
    lerobot = [LeRobotDataset(f"local/{s.name}", root=s, delta_timestamps={"action": [i / f for i in CHUNK]})
               for s, f in zip(srcs, (10, 15), strict=True)]
    alone = [{int(s["index"]): s for s in CompiledDataset(str(o), delta_indices={"action": CHUNK}, shuffle=False)}
             for o in outs]
    dims, seen = (3, 2), set()
    for s in mix:
        k, i = int(s["dataset_index"]), int(s["index"])
        seen.add(k)
        want = lerobot[k][i]
        d = dims[k]
        for key in (STATE, "action"):
            assert s[key].shape[-1] == 3 and torch.equal(s[key][..., :d], want[key]), key
            assert not s[key][..., d:].any() and s[f"{key}_dim_is_pad"].tolist() == [j >= d for j in range(3)]
        for key in ("timestamp", "frame_index", "episode_index", "action_is_pad"):
            assert torch.equal(s[key], want[key]), key
        assert s["task"] == want["task"]
        assert torch.equal(s[TOP], alone[k][i][TOP if k == 0 else FRONT])
        assert bool(s[f"{WRIST}_is_missing"]) == (k == 1)
        assert torch.equal(s[WRIST], alone[0][i][WRIST]) if k == 0 else not s[WRIST].any()
    assert seen == {0, 1}
    assert list(mix.meta.features[STATE]["shape"]) == [3] and mix.meta.features[STATE]["names"] == ["j0", "j1", "j2"]


def test_lerobot_train_with_a_remap_file(robots, tmp_path):
    _, outs = robots
    spec = tmp_path / "mix.json"
    spec.write_text(json.dumps({"remap": REMAP, "pad": "max", "weights": "frames"}))
    args = [*TINY_ACT, f"--dataset.root={outs[0]},{outs[1]}", "--dataset.repo_id=local/mix", "--batch_size=4",
            "--num_workers=0", "--steps=2", "--log_freq=1", "--seed=1", f"--output_dir={tmp_path / 'out'}",
            "--wandb.enable=false", f"--roboreel.remap={spec}"]
    run = run_train(args, tmp_path / "probe")
    assert run.returncode == 0, run.log[-3000:]
    batches = run.batches()
    assert len(batches) == 2 and {b["loader"] for b in batches} == {"StageLoader"}


def test_shares_over_4000_draws(robots):
    """Each member's share of >= 4,000 draws within 2 points of its weight (cameras dropped: tabular reads)."""
    _, outs = robots
    no_cameras = [{TOP: None, WRIST: None}, {FRONT: None}]
    for weights in ([0.3, 0.7], "frames"):
        ds = CompiledDataset([str(o) for o in outs], remap=no_cameras, pad="max", weights=weights,
                             samples_per_epoch=4000, seed=2)
        drawn = [int(s["dataset_index"]) for s in ds]
        want = 0.7 if weights != "frames" else ds.members[1].num_frames / ds.num_frames
        assert len(drawn) == 4000 and abs(sum(drawn) / 4000 - want) <= 0.02
