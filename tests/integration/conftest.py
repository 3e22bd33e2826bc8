"""The LeRobot integration suite: roboreel held against the real LeRobot 0.6.1 (its metadata, policies,
LeRobotDataset samples, ``lerobot-train``, accelerate). Runs inside a venv that has LeRobot
(``scripts/ci_lerobot.sh VENV``); every module skips cleanly where ``import lerobot`` fails.

One small source (6 episodes, 1 camera, 48x64, fps 10: a tiny ACT trains on it at a few seconds per step) is
synthesised and compiled once per session, in this venv (roboreel's compile works with LeRobot's PyAV 15).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

REPO_ID = "local/synth"
# ACT as small as LeRobot allows (resnet18 is its smallest backbone); no pretrained weights can be downloaded here.
TINY_ACT = ["--policy.type=act", "--policy.device=cpu", "--policy.pretrained_backbone_weights=null",
            "--policy.push_to_hub=false", "--policy.dim_model=32", "--policy.n_heads=2",
            "--policy.dim_feedforward=64", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1",
            "--policy.chunk_size=4", "--policy.n_action_steps=4", "--policy.latent_dim=8"]
# A run never waits on another rank forever: a hang fails the test instead of the job.
RUN_TIMEOUT_S = float(os.environ.get("ROBOREEL_LEROBOT_TIMEOUT_S", "900"))


@pytest.fixture(scope="session")
def lerobot_pair(tmp_path_factory) -> tuple[Path, Path]:
    """(source, compiled): a LeRobot v3 source with real AV1 mp4s and its roboreel compile."""
    from roboreel.compile import CompileSettings, compile_dataset
    from roboreel.synth import SynthConfig, synthesize

    root = tmp_path_factory.mktemp("lerobot")
    src, out = root / "src", root / "compiled"
    synthesize(src, SynthConfig(episodes=6, min_length=20, max_length=30, fps=10, cameras=("observation.images.top",), height=48,
                                width=64, tasks=2))
    settings = dataclasses.replace(CompileSettings.for_tests(), episodes_per_shard=2)
    compile_dataset(str(src), str(out), settings=settings, workers=1)
    return src, out


def train_env() -> dict[str, str]:
    """The environment of a training subprocess: this worktree importable, one torch thread per process (two
    cores shared by everything on the machine), no hub access."""
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled",
           "TOKENIZERS_PARALLELISM": "false"}
    return env


def roboreel_cmd() -> list[str]:
    return [sys.executable, "-m", "roboreel.cli"]
