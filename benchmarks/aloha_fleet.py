"""Many episodes of realistic footage, written by LeRobot: the sample-order benchmark's data sets.

Rendering ALOHA (render_aloha.py) runs at ~3 frames/s, far too slow for the >= 100 episodes x several cameras a
benchmark of sample order needs (a worker's pool must not hold every episode). This script takes a rendered
dataset's footage and writes a new LeRobot v3 dataset of ``--episodes`` episodes of ``--frames`` frames and
``--cameras`` cameras, through LeRobot's own writer (``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` /
``finalize``, its default AV1 encoding, files rolled over at ``--file-mb``):

- each episode is a window of a random rendered episode at a random start, its state and action rows with it;
- each camera sees that footage through its own fixed view (identity, mirrored, flipped, both), optionally
  resized (``--size``, INTER_AREA);
- every frame gets its own Gaussian sensor noise (``--noise``, in 8-bit levels), so no two episodes or cameras
  code alike and the bitrate is that of a real sensor, not of clean renders.

Run it from LeRobot's venv:

    .venv-lerobot/bin/python benchmarks/aloha_fleet.py data/aloha data/fleet1 --episodes 100 --frames 120
    .venv-lerobot/bin/python benchmarks/aloha_fleet.py data/aloha data/fleet4 --episodes 100 --frames 60 --cameras 4

The dataset is written under a temporary name and renamed into place when complete.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

VIEWS = ("top", "mirror", "flip", "rot180")


def footage(src: Path) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], int]:
    """Per rendered episode: frames [T, H, W, 3] uint8, state and action rows; and the fps."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("roboreel/aloha_render", root=src)
    cam = ds.meta.camera_keys[0]
    frames, states, actions = [], [], []
    for ep in range(ds.meta.total_episodes):
        a = int(ds.meta.episodes[ep]["dataset_from_index"])
        b = int(ds.meta.episodes[ep]["dataset_to_index"])
        items = [ds[i] for i in range(a, b)]
        frames.append(np.stack([(it[cam].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8) for it in items]))
        states.append(np.stack([it["observation.state"].numpy() for it in items]))
        actions.append(np.stack([it["action"].numpy() for it in items]))
    return frames, states, actions, int(ds.meta.fps)


def view(frame: np.ndarray, camera: int, size: tuple[int, int] | None) -> np.ndarray:
    out = frame
    if VIEWS[camera % 4] in ("mirror", "rot180"):
        out = out[:, ::-1]
    if VIEWS[camera % 4] in ("flip", "rot180"):
        out = out[::-1]
    if size is not None:
        import cv2

        out = cv2.resize(np.ascontiguousarray(out), (size[1], size[0]), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(out)


def write(src: Path, out: Path, *, episodes: int, frames: int, cameras: int, size: tuple[int, int] | None,
          noise: float, file_mb: int, seed: int) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    clips, states, actions, fps = footage(src)
    h, w = size or clips[0].shape[1:3]
    names = [f"observation.images.{VIEWS[c % 4]}{c // 4 or ''}" for c in range(cameras)]
    features = {k: {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]} for k in names}
    features["observation.state"] = {"dtype": "float32", "shape": (14,), "names": None}
    features["action"] = {"dtype": "float32", "shape": (14,), "names": None}
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    ds = LeRobotDataset.create(repo_id="roboreel/aloha_fleet", fps=fps, features=features, root=tmp,
                               robot_type="aloha", use_videos=True, video_files_size_in_mb=file_mb,
                               data_files_size_in_mb=max(1, file_mb // 10))
    rng = np.random.default_rng(seed)
    t0 = time.time()
    for ep in range(episodes):
        s = int(rng.integers(len(clips)))
        n = min(frames, len(clips[s]))
        o = int(rng.integers(len(clips[s]) - n + 1))
        for i in range(o, o + n):
            row = {"observation.state": states[s][i], "action": actions[s][i], "task": "Insert the peg."}
            for c, k in enumerate(names):
                img = view(clips[s][i], c, size).astype(np.int16)
                img += rng.normal(0, noise, img.shape).round().astype(np.int16)
                row[k] = np.clip(img, 0, 255).astype(np.uint8)
            ds.add_frame(row)
        ds.save_episode()
        print(f"episode {ep + 1}/{episodes}: {(time.time() - t0):.0f} s", flush=True)
    ds.finalize()
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path, help="a rendered dataset (render_aloha.py)")
    p.add_argument("out", type=Path)
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--frames", type=int, default=120)
    p.add_argument("--cameras", type=int, default=1)
    p.add_argument("--size", default=None, help="HxW of every camera (default: the footage's)")
    p.add_argument("--noise", type=float, default=2.0, help="sensor noise sigma in 8-bit levels")
    p.add_argument("--file-mb", type=int, default=50, help="LeRobot's video_files_size_in_mb (rolls files over)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    size = tuple(int(v) for v in a.size.lower().split("x")) if a.size else None
    if (a.out / "meta" / "info.json").exists():
        print(f"{a.out} exists")
        return 0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write(a.src, a.out, episodes=a.episodes, frames=a.frames, cameras=a.cameras, size=size, noise=a.noise,
          file_mb=a.file_mb, seed=a.seed)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
