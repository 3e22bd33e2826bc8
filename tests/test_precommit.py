"""The pre-commit hook, run for real with `pre-commit try-repo` on a dataset repository (docs/ci.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roboreel.synth import SynthConfig, synthesize

REPO = Path(__file__).resolve().parents[1]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def _try_repo(dataset: Path, tmp_path: Path, hook: str) -> subprocess.CompletedProcess:
    _git(dataset, "init", "-q")
    _git(dataset, "add", "-A")
    _git(dataset, "commit", "-qm", "dataset")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(REPO), hook, "--all-files"],
                          cwd=dataset, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture()
def dataset(tmp_path):
    def make(**overrides) -> Path:
        root = tmp_path / "dataset"
        cfg = SynthConfig(episodes=4, min_length=8, max_length=12, height=64, width=64, cameras=("observation.images.top",),
                          data_files_size_in_mb=0.002, **overrides)
        synthesize(root, cfg)
        return root
    return make


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_hook_passes_on_a_clean_dataset(dataset, tmp_path):
    r = _try_repo(dataset(), tmp_path, "roboreel-validate")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "roboreel validate" in r.stdout and "Passed" in r.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_hook_fails_on_a_multi_episode_row_group_naming_the_file(dataset, tmp_path):
    root = dataset(row_groups="file")  # several episodes share one row group: what the hook exists to catch
    r = _try_repo(root, tmp_path, "roboreel-validate-fast")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Failed" in r.stdout and "rowgroup-multi-episode" in r.stdout
    assert "data/chunk-000/file-000.parquet" in r.stdout
