"""The LeRobot integration suite: roboreel held against the real LeRobot 0.6.1 (its metadata, policies,
LeRobotDataset samples, ``lerobot-train``, accelerate). Runs inside a venv that has LeRobot
(``scripts/ci_lerobot.sh VENV``); every module skips cleanly where ``import lerobot`` fails.

One small source (6 episodes, 1 camera, 48x64, fps 10: a tiny ACT trains on it in seconds per step) is
synthesised and compiled once per session, in this venv (roboreel's compile works with LeRobot's PyAV 15).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def lerobot_pair(tmp_path_factory) -> tuple[Path, Path]:
    """(source, compiled): a LeRobot v3 source with real AV1 mp4s and its roboreel compile (3 shards)."""
    from roboreel.compile import CompileSettings, compile_dataset
    from roboreel.synth import SynthConfig, synthesize

    root = tmp_path_factory.mktemp("lerobot")
    src, out = root / "src", root / "compiled"
    synthesize(src, SynthConfig(episodes=6, min_length=20, max_length=30, fps=10,
                                cameras=("observation.images.top",), height=48, width=64, tasks=2))
    settings = dataclasses.replace(CompileSettings.for_tests(), episodes_per_shard=2)
    compile_dataset(str(src), str(out), settings=settings, workers=1)
    return src, out
