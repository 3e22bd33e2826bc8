"""Crash-safe compile: SIGKILL the whole compiler (parent and pool workers) at random moments, rerun it, and the
final OUT is byte-identical to an uninterrupted compile and validates clean.

Kill moments are drawn (seeded) two ways so they cover the process pool's whole lifetime: at a random time
after start (start-up, source checks, record and snapshot writing, pool spawn), or once a random number of shards
has finished plus a random delay (mid-shard in either worker, between shards, during finalize). After every kill,
everything a later step would trust (sidecars, roboreel.json) must point at whole files.

The default run does a CI-sized sweep; ``ROBOREEL_SLOW=1`` (or ``-m slow``) runs the full one, with
``ROBOREEL_KILLS`` kills (default 24, in FULL_PARTS parts) and ``ROBOREEL_KILL_SEED`` (default 6). Every compile
uses the fastest x265 preset: what a kill can break (sidecars, record, manifest, renames) does not depend on it, and
each kill then costs a fraction of the CPU. See docs/reliability.md.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from roboreel.cli import main
from roboreel.formats.manifest import MANIFEST_NAME

from .trees import assert_same_tree, temp_files, trusted_files_are_whole

EPISODES = 10  # one shard each
CI_KILLS = 2  # the default part's kills; the slow stage's full sweep has 24
FULL_PARTS = 4  # the full sweep's kills, in parts run side by side


@dataclass
class Kill:
    trial: int
    run: int
    sidecars: int  # shards complete when the kill landed
    manifest: bool  # roboreel.json already written


def compile_cmd(src: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "roboreel.cli", "compile", str(src), str(out), "--workers", "2",
            "--episodes-per-shard", "1", "--no-progress", "--preset", "ultrafast"]


def sidecars(out: Path) -> int:
    return len(list((out / ".roboreel-parts").glob("shard-*.json")))


def _group_gone(pgid: int, timeout_s: float = 10.0) -> None:
    """Wait until no process of the killed group is left (pool workers die with their parent)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"processes of group {pgid} outlived SIGKILL")


def run_killed(cmd: list[str], out: Path, rng: random.Random, full_s: float) -> bool:
    """Run ``cmd`` in a new session and SIGKILL its process group at a random moment; False if it finished
    before the moment came."""
    by_time = rng.random() < 0.4
    at_s = rng.uniform(0.0, full_s)
    wait_for, extra_s = rng.randint(0, EPISODES), rng.uniform(0.0, 0.15)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        t0 = time.monotonic()
        while proc.poll() is None:
            if by_time and time.monotonic() - t0 >= at_s:
                break
            if not by_time and sidecars(out) >= wait_for:
                time.sleep(extra_s)
                break
            time.sleep(0.002)
        if proc.poll() is not None:
            return False
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    _group_gone(proc.pid)
    return proc.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def kill_source(tmp_path_factory):
    """A 10-episode source and its uninterrupted compile (CLI, 2 workers): the reference bytes."""
    from conftest import make_source

    src = make_source(tmp_path_factory.mktemp("kill") / "src", episodes=EPISODES, min_length=30, max_length=50)
    ref = tmp_path_factory.mktemp("kill-ref") / "out"
    t0 = time.monotonic()
    subprocess.run(compile_cmd(src, ref), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return src, ref, time.monotonic() - t0


def sweep(kill_source, tmp_path: Path, kills: int, seed: int | str) -> list[Kill]:
    src, ref, full_s = kill_source
    rng = random.Random(seed)
    done: list[Kill] = []
    trial = 0
    while len(done) < kills:
        assert trial < 4 * kills, f"only {len(done)} of {kills} kills landed in {trial} trials"
        out = tmp_path / f"trial-{trial}"
        cmd = compile_cmd(src, out)
        for run in range(rng.choice((1, 1, 2))):  # sometimes kill the resumed run too
            if not run_killed(cmd, out, rng, full_s):
                break
            kill = Kill(trial, run, sidecars(out), (out / MANIFEST_NAME).exists())
            done.append(kill)
            # nothing a later step trusts is half-written, at any instant
            assert trusted_files_are_whole(out) == [], kill
            if kill.manifest:
                assert main(["validate", str(out)]) == 0, kill
        assert main(cmd[3:]) == 0  # the same command again (the CLI's entry point, in this process)
        assert_same_tree(out, ref)
        assert temp_files(out) == []
        assert main(["validate", str(out)]) == 0
        trial += 1
    return done


def _summary(kills: list[Kill]) -> str:
    phases = Counter("finalized" if k.manifest else "before any shard" if k.sidecars == 0 else
                     "all shards, finalizing" if k.sidecars == EPISODES else "mid-pool" for k in kills)
    return f"{len(kills)} kills: {dict(phases)}; shards done at each kill: {[k.sidecars for k in kills]}"


def test_kill_9_then_rerun_is_byte_identical(kill_source, tmp_path, capsys):
    kills = sweep(kill_source, tmp_path, CI_KILLS, seed=1)
    with capsys.disabled():
        print(f"\nkill -9 (CI): {_summary(kills)}")


@pytest.mark.slow
@pytest.mark.parametrize("part", range(FULL_PARTS))
def test_kill_9_full_sweep(kill_source, tmp_path, capsys, part):
    """The full sweep, in FULL_PARTS parts of its own seeds each (the slow stage spreads them over processes)."""
    n = max(20, int(os.environ.get("ROBOREEL_KILLS", "24")))
    seed = os.environ.get("ROBOREEL_KILL_SEED", "6")
    kills = sweep(kill_source, tmp_path, -(-n // FULL_PARTS), seed=f"{seed}/{part}")
    with capsys.disabled():
        print(f"\nkill -9 (full, part {part + 1}/{FULL_PARTS}): {_summary(kills)}")
    # the triggers spread kills over the pool's lifetime: some must land while shards are being compiled
    assert any(0 < k.sidecars < EPISODES for k in kills), _summary(kills)


@pytest.fixture(scope="module")
def grow_sources(tmp_path_factory):
    """A 7-episode source compiled (the OUT an update starts from), the same source grown to 10 episodes, and
    the uninterrupted update of that OUT (the reference bytes)."""
    from conftest import make_source

    root = tmp_path_factory.mktemp("kill-grow")
    old = make_source(root / "old", episodes=7, min_length=30, max_length=50)
    new = make_source(root / "new", episodes=EPISODES, min_length=30, max_length=50)
    base = root / "base"
    subprocess.run(compile_cmd(old, base), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ref = root / "ref"
    shutil.copytree(base, ref)
    t0 = time.monotonic()
    subprocess.run(compile_cmd(new, ref), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return new, base, ref, time.monotonic() - t0


def test_kill_9_during_an_update_then_rerun_finishes_it(grow_sources, tmp_path):
    """Kill -9 while an update runs: at every instant the published roboreel.json (old or new) names whole
    files; the same command then finishes the update, byte-identical to an uninterrupted one, validate clean."""
    new, base, ref, full_s = grow_sources
    rng = random.Random(3)
    landed = []
    for trial in range(4):
        out = tmp_path / f"trial-{trial}"
        shutil.copytree(base, out)
        cmd = compile_cmd(new, out)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            time.sleep(rng.uniform(0.0, full_s))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                landed.append(trial)
        finally:
            proc.wait()
        _group_gone(proc.pid)
        assert trusted_files_are_whole(out) == [], trial  # the published roboreel.json names whole files
        assert main(cmd[3:]) == 0  # the same command again (the CLI's entry point, in this process)
        assert_same_tree(out, ref)
        assert temp_files(out) == []
        assert main(["validate", str(out)]) == 0
    assert landed, "no kill landed before the update finished"
