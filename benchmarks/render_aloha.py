"""Render ALOHA sim footage into a LeRobot v3 dataset: the benchmark's realistic-footage data set.

Synthetic grids (roboreel.synth) are coded noise; real camera footage has large flat areas, texture and motion,
which changes how fast a frame decodes. This script renders the gym-aloha insertion scene (MuJoCo, the "top"
camera at 480x640, 50 fps) while both arms follow smooth random joint trajectories around the start pose, and
writes it with LeRobot's own API and encoding defaults (``LeRobotDataset.create`` / ``add_frame`` /
``save_episode`` / ``finalize``), i.e. exactly what a LeRobot user's dataset looks like on disk.

Run it from LeRobot's venv (``.venv-lerobot``, made by ``.ci/ci_lerobot.sh``; gym-aloha installed there with
``.venv-lerobot/bin/pip install gym-aloha``); rendering is ~3 frames/s on one core, so it is cached:

    apt-get install -y libosmesa6 libgl1
    MUJOCO_GL=osmesa nice -n 10 .venv-lerobot/bin/python benchmarks/render_aloha.py \
        --out data/aloha --episodes 4 --frames 150

An existing complete dataset at ``--out`` is left alone (``--force`` re-renders). The dataset is written under a
temporary name and renamed into place when complete, so an interrupted render leaves nothing half-written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

FPS = 50
TASK = "Insert the peg into the socket (random smooth joint motion)."


def trajectory(rng: np.random.Generator, frames: int, start: np.ndarray) -> np.ndarray:
    """Smooth joint targets [frames, 14]: the start pose plus a few low-frequency sinusoids per joint, so the arms
    sweep across the table (real motion in the frame) without the jitter of per-step random actions."""
    t = np.arange(frames)[:, None] / FPS
    out = np.repeat(start[None], frames, axis=0)
    for _ in range(3):
        amp = rng.uniform(0.05, 0.35, size=start.shape)
        freq = rng.uniform(0.1, 0.6, size=start.shape)
        phase = rng.uniform(0, 2 * np.pi, size=start.shape)
        out += amp * np.sin(2 * np.pi * freq * t + phase)
    grippers = [6, 13]  # normalised gripper opening in [0, 1]
    out[:, grippers] = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(0.2, 0.5) * t + rng.uniform(0, 6))[:, :1]
    return out.astype(np.float32)


def render(out: Path, *, episodes: int, frames: int, seed: int) -> None:
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    import gym_aloha  # noqa: F401  (registers the envs)
    import gymnasium as gym
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    env = gym.make("gym_aloha/AlohaInsertion-v0", obs_type="pixels_agent_pos")
    features = {
        "observation.images.top": {"dtype": "video", "shape": (480, 640, 3),
                                   "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": (14,), "names": None},
        "action": {"dtype": "float32", "shape": (14,), "names": None},
    }
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    ds = LeRobotDataset.create(repo_id="roboreel/aloha_render", fps=FPS, features=features, root=tmp,
                               robot_type="aloha", use_videos=True)
    rng = np.random.default_rng(seed)
    start = np.array([0, -0.96, 1.16, 0, -0.3, 0, 1.0, 0, -0.96, 1.16, 0, -0.3, 0, 1.0], dtype=np.float32)
    t0 = time.time()
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        actions = trajectory(rng, frames, start)
        for i in range(frames):
            ds.add_frame({"observation.images.top": obs["pixels"]["top"],
                          "observation.state": np.asarray(obs["agent_pos"], dtype=np.float32),
                          "action": actions[i], "task": TASK})
            obs, *_ = env.step(actions[i])
        ds.save_episode()
        done = (ep + 1) * frames
        print(f"episode {ep + 1}/{episodes}: {done} frames, {done / (time.time() - t0):.1f} frames/s", flush=True)
    ds.finalize()
    env.close()
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("data/aloha"))
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--frames", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true")
    a = p.parse_args(argv)
    out = a.out.expanduser()
    if (out / "meta" / "info.json").exists() and not a.force:
        print(f"{out} exists (use --force to re-render)")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    render(out, episodes=a.episodes, frames=a.frames, seed=a.seed)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
