"""scripts/slurm_compile.sh on a real SLURM: the array of ``--part K/N`` jobs plus the dependent finalize job
compile a dataset that validates clean and is byte-identical to a one-machine compile, with more parts than
shards (some parts get no shard) and with fewer.

Opt-in (it needs running SLURM daemons): ``ROBOREEL_SLURM=1`` and a working ``sbatch``/``squeue``; on a Debian
machine where you are root, ``.ci/ci_slurm.sh`` installs and starts a single-node cluster. The jobs inherit
this process's environment (sbatch's default ``--export=ALL``), so they import the roboreel under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reliability.trees import assert_same_tree

from roboreel.cli import main
from roboreel.compile import CompileSettings, compile_dataset
from roboreel.formats.manifest import load_manifest

pytestmark = pytest.mark.slurm

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm_compile.sh"
COMPILE_ARGS = "--preset ultrafast"
SETTINGS = CompileSettings(preset="ultrafast")
TIMEOUT_S = 600


def _slurm_ready() -> str | None:
    """Why the SLURM test cannot run here (None: it can)."""
    if os.environ.get("ROBOREEL_SLURM") != "1":
        return "opt-in: set ROBOREEL_SLURM=1 (and start SLURM, e.g. .ci/ci_slurm.sh)"
    if not shutil.which("sbatch") or not shutil.which("squeue"):
        return "sbatch/squeue not found"
    r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not any(s.startswith(("idle", "mixed", "alloc")) for s in r.stdout.split()):
        return f"no SLURM node is up: {r.stdout.strip()} {r.stderr.strip()}"
    return None


@pytest.fixture(scope="module")
def slurm_case(tmp_path_factory):
    """A 5-episode source (the default plan gives 4 shards) and its one-machine compile."""
    reason = _slurm_ready()
    if reason:
        pytest.skip(reason)
    from conftest import make_source

    src = make_source(tmp_path_factory.mktemp("slurm") / "src", episodes=5, min_length=20, max_length=30)
    local = tmp_path_factory.mktemp("slurm-local") / "out"
    report = compile_dataset(str(src), str(local), settings=SETTINGS, workers=2)
    assert report.shards == 4 and report.finalized
    return src, local


def _submit(src: Path, out: Path, parts: int, cpus: int, cwd: Path) -> list[str]:
    """Run the script; returns the job ids it submitted (array, finalize)."""
    env = {**os.environ, "SRC": str(src), "OUT": str(out), "PARTS": str(parts), "CPUS": str(cpus),
           "ROBOREEL": f"{sys.executable} -m roboreel.cli", "COMPILE_ARGS": COMPILE_ARGS,
           "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[1]), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(["bash", str(SCRIPT)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    finalize_id = r.stdout.split()[0]
    array_id = r.stdout.split("submitted array job ")[1].split()[0]
    return [array_id, finalize_id]


def _wait(job_ids: list[str], cwd: Path) -> None:
    """Until none of the jobs is queued or running; fails fast on a finalize that can never start."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        r = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T %r"], capture_output=True,
                           text=True, timeout=30)
        if r.returncode != 0 and "Invalid job id" in r.stderr or not r.stdout.strip():
            return
        if "DependencyNeverSatisfied" in r.stdout:
            subprocess.run(["scancel", *job_ids], check=False)
            pytest.fail(f"an array task failed: {r.stdout}\n{_logs(cwd)}")
        time.sleep(1)
    subprocess.run(["scancel", *job_ids], check=False)
    pytest.fail(f"jobs {job_ids} not done after {TIMEOUT_S}s\n{_logs(cwd)}")


def _logs(cwd: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(cwd.glob("roboreel-*.log")))


@pytest.mark.parametrize(("parts", "cpus"), [(6, 1), (3, 2)])
def test_slurm_array_then_finalize_equals_one_machine(slurm_case, tmp_path, parts, cpus):
    src, local = slurm_case
    out = tmp_path / "out"
    logs = tmp_path / "logs"
    logs.mkdir()
    _wait(_submit(src, out, parts, cpus, logs), logs)
    task_logs = sorted(logs.glob("roboreel-compile-*.log"))
    assert len(task_logs) == parts, _logs(logs)
    finalize_log = next(logs.glob("roboreel-finalize-*.log"), None)
    assert finalize_log is not None and "finalized" in finalize_log.read_text(), _logs(logs)
    assert len(load_manifest(str(out)).shards) == 4  # parts 6: two parts get no shard; parts 3: blocks of 1-2
    assert main(["validate", str(out)]) == 0
    assert_same_tree(out, local)
