"""Constants and helpers of the LeRobot integration suite (a module of its own: ``conftest`` is a name
tests/conftest.py already holds)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
