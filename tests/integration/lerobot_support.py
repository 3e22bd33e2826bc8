"""The LeRobot integration suite's data, constants and helpers: roboreel held against the real LeRobot 0.6.1 (its
metadata, policies, LeRobotDataset samples, ``lerobot-train``, accelerate). The suite runs inside a venv that has
LeRobot (``.ci/ci_lerobot.sh VENV``); every module skips cleanly where ``import lerobot`` fails.

Not a conftest.py: tests/support imports ``conftest`` by name, which must stay tests/conftest.py. Test modules
import the ``lerobot_pair`` fixture from here (as ``lerobot_pair_fixture``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.settings import FAST

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().parent / "train_probe.py"
REPO_ID = "local/synth"
# ACT as small as LeRobot allows (resnet18 is its smallest backbone); no pretrained weights can be downloaded here.
TINY_ACT = ["--policy.type=act", "--policy.device=cpu", "--policy.pretrained_backbone_weights=null",
            "--policy.push_to_hub=false", "--policy.dim_model=32", "--policy.n_heads=2",
            "--policy.dim_feedforward=64", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1",
            "--policy.chunk_size=4", "--policy.n_action_steps=4", "--policy.latent_dim=8"]
ACT_CHUNK = 4
# A run never waits on another rank forever: a hang fails the test (after this long) instead of the job.
RUN_TIMEOUT_S = float(os.environ.get("ROBOREEL_LEROBOT_TIMEOUT_S", "600"))


_PAIR: list[tuple[Path, Path]] = []  # one per session, whichever module asks first


@pytest.fixture(scope="session", name="lerobot_pair")
def lerobot_pair_fixture(tmp_path_factory) -> tuple[Path, Path]:
    """(source, compiled): a LeRobot v3 source with real AV1 mp4s (6 episodes, 1 camera, 48x64, fps 10: a tiny
    ACT trains on it at well under a second per step) and its roboreel compile (3 shards), made once, in this
    venv (roboreel's compile works with LeRobot's PyAV 15)."""
    if not _PAIR:
        from roboreel.compile import compile_dataset
        from roboreel.synth import SynthConfig, synthesize

        root = tmp_path_factory.mktemp("lerobot")
        src, out = root / "src", root / "compiled"
        synthesize(src, SynthConfig(episodes=6, min_length=20, max_length=30, fps=10,
                                    cameras=("observation.images.top",), height=48, width=64, tasks=2))
        settings = dataclasses.replace(FAST, episodes_per_shard=2)
        compile_dataset(str(src), str(out), settings=settings, workers=1)
        _PAIR.append((src, out))
    return _PAIR[0]


def train_env(probe_dir: Path) -> dict[str, str]:
    """A training subprocess's environment: this checkout importable, one torch thread per process (the cores
    are few and shared), no hub, no wandb."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "ROBOREEL_PROBE_DIR": str(probe_dir), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


@dataclass
class Run:
    returncode: int | None  # None: killed after RUN_TIMEOUT_S
    log: str
    probe_dir: Path

    def batches(self, rank: int = 0) -> list[dict[str, Any]]:
        """The batches rank ``rank``'s training loop took, in order (train_probe.py)."""
        path = self.probe_dir / f"rank{rank}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def started(self) -> int:
        return len(list(self.probe_dir.glob("rank*.started")))


def run_train(args: list[str], probe_dir: Path, *, launcher: list[str] | None = None) -> Run:
    """``[launcher] train_probe.py ARGS`` (= ``roboreel lerobot-train ARGS`` plus the batch recorder). The whole
    process group is killed on timeout, so no rank outlives a hung run."""
    cmd = [*(launcher or [sys.executable]), str(PROBE), *args]
    proc = subprocess.Popen(cmd, env=train_env(probe_dir), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        return Run(proc.returncode, out, probe_dir)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return Run(None, out, probe_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
