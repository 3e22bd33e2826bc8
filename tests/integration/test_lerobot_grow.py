"""A dataset grown and edited with LeRobot's own tools, recompiled into the same OUT: ``LeRobotDataset.resume()``
appends episodes, ``dataset_tools.delete_episodes`` (what ``lerobot-edit-dataset`` runs) removes one. Each
update reuses what is unchanged and ends equal to a fresh compile of the edited source; LeRobotDataset and the
compiled reader agree sample for sample."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot.datasets.dataset_tools", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

from lerobot.datasets import LeRobotDataset  # noqa: E402
from lerobot.datasets.dataset_tools import delete_episodes  # noqa: E402
from support.settings import FAST

from roboreel.compile import compile_dataset  # noqa: E402
from roboreel.compile.video import psnr  # noqa: E402
from roboreel.formats.manifest import load_manifest  # noqa: E402
from roboreel.reader import CompiledDataset  # noqa: E402

REPO = "local/grow"
CAM = "observation.images.top"
H, W = 48, 64
FEATURES = {
    CAM: {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]},
    "observation.state": {"dtype": "float32", "shape": (2,), "names": None},
    "action": {"dtype": "float32", "shape": (2,), "names": None},
}
SETTINGS = FAST


def _record(ds: LeRobotDataset, first: int, count: int) -> None:
    """``count`` episodes of 12-16 frames; every frame a distinct smooth picture (episode, frame)."""
    yy, xx = np.mgrid[0:H, 0:W]
    for e in range(first, first + count):
        for f in range(12 + e % 5):
            img = np.stack([(xx * 4 + f * 9) % 256, (yy * 5 + e * 40) % 256, (xx + yy + f * 3) % 256], -1)
            ds.add_frame({CAM: img.astype(np.uint8), "observation.state": np.array([e, f], np.float32),
                          "action": np.array([f, e], np.float32), "task": f"task {e % 2}"})
        ds.save_episode()
    ds.finalize()


def _files(root: Path, top: str) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / top).rglob("*")) if p.is_file()}


def _assert_same_compile(got: Path, want: Path) -> None:
    a, b = load_manifest(str(got)), load_manifest(str(want))
    assert [s.sha256 for s in a.shards] == [s.sha256 for s in b.shards]
    assert a.episodes == b.episodes
    assert _files(got, "meta") == _files(want, "meta") and _files(got, "data") == _files(want, "data")
    assert len(_files(got, "shards")) == len(b.shards)


def _same_samples(compiled: Path, source: Path, repo_id: str) -> None:
    """Every sample of an epoch: the same keys, every tabular value exactly, the camera frame within the compile's
    fidelity floor of LeRobot's own decode (re-encoded HEVC against the AV1 it decodes)."""
    want = LeRobotDataset(repo_id, root=source)
    got = {int(s["index"]): s for s in CompiledDataset(str(compiled), seed=0)}
    assert sorted(got) == list(range(len(want)))
    for i in range(len(want)):
        w, g = want[i], got[i]
        assert set(g) == set(w), (i, set(g) ^ set(w))
        for key in w:
            if key == CAM:
                assert g[key].shape == w[key].shape and g[key].dtype == w[key].dtype, i
                a, b = ((x * 255).round().to(torch.uint8).numpy() for x in (g[key], w[key]))
                assert psnr(a, b) >= SETTINGS.min_psnr, (i, psnr(a, b))
            elif key == "task":
                assert g[key] == w[key], i
            else:
                assert np.array_equal(np.asarray(g[key]), np.asarray(w[key])), (i, key)


def test_resume_then_delete_updates_the_compile(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    ds = LeRobotDataset.create(REPO, fps=10, features=FEATURES, root=src, use_videos=True)
    _record(ds, 0, 4)
    first = compile_dataset(str(src), str(out), settings=SETTINGS, workers=1)
    assert (first.episodes_compiled, first.episodes_reused) == (4, 0)
    before = _files(src, "videos") | _files(src, "data")

    _record(LeRobotDataset.resume(REPO, root=src), 4, 3)  # LeRobot appends 3 episodes
    after = _files(src, "videos") | _files(src, "data")
    kept = [k for k in before if after.get(k) == before[k]]
    grown = compile_dataset(str(src), str(out), settings=SETTINGS, workers=1)
    assert grown.generation == 2 and grown.episodes == 7
    # LeRobot 0.6.1 appends into new files and leaves the old ones as they were: their episodes are not encoded
    assert sorted(kept) == sorted(before), kept
    assert (grown.episodes_reused, grown.episodes_compiled) == (4, 3), grown.summary()
    fresh = tmp_path / "fresh"
    compile_dataset(str(src), str(fresh), settings=SETTINGS, workers=1)
    _assert_same_compile(out, fresh)
    _same_samples(out, src, REPO)

    edited = tmp_path / "edited"
    delete_episodes(LeRobotDataset(REPO, root=src), [1], output_dir=edited, repo_id=REPO + "_edited")
    shrunk = compile_dataset(str(edited), str(out), settings=SETTINGS, workers=1)
    assert shrunk.generation == 3 and shrunk.episodes == 6
    # LeRobot re-encodes the file that mixed kept and deleted episodes (0-3) and copies the other (4-6, now 3-5):
    # those three keep their clips (renumbered, re-packed); the others are compiled again
    assert (shrunk.episodes_reused, shrunk.episodes_compiled) == (3, 3), shrunk.summary()
    fresh2 = tmp_path / "fresh2"
    compile_dataset(str(edited), str(fresh2), settings=SETTINGS, workers=1)
    _assert_same_compile(out, fresh2)
    _same_samples(out, edited, REPO + "_edited")
