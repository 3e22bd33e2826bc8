"""Real two-rank DDP: torchrun launches tests/support/torchrun_worker.py on 2 processes (gloo), each reads one epoch
of a small compiled dataset through ``roboreel.loader`` with rank and world size left to torch.distributed.

Checked: equal steps, disjoint ranks covering the epoch as docs/reader.md ("Distribution and DDP") promises (each
rank exactly ``N // world_size`` consecutive frames of the epoch's shard order, the last ``N mod world_size``
dropped), the detected world, exact resume across a second launch, and the refusal of a state saved with another
world size. Four launches, each a few seconds of CPU on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.datasets import compiled_pair
from support.plan import epoch_slices

from roboreel.reader import CompiledDataset

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "support" / "torchrun_worker.py"
WORKERS = (0, 2)  # DataLoader workers per rank
BATCH, EPOCH, SEED, STOP_AFTER = 4, 1, 7, 3
LAUNCH_TIMEOUT_S = 300  # generous: a loaded 2-core machine; a hang (unequal steps) ends in the group's timeout


def torchrun(nproc: int, mode: str, data: Path, out: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """torchrun with ``nproc`` ranks of the worker; ``args`` come last (a repeated option wins over the default)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           str(WORKER), mode, str(data), str(out), "--workers", ",".join(map(str, WORKERS)),
           "--batch-size", str(BATCH), "--epoch", str(EPOCH), "--seed", str(SEED), "--stop-after", str(STOP_AFTER),
           *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)


def ran(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-6000:]}"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    # 5 episodes, 5 shards (one is cut between the ranks), 59 frames: odd, so one frame is dropped
    path = compiled_pair(tmp_path_factory, episodes_per_shard=1, episodes=5, min_length=8, max_length=14, seed=3)[1]
    assert CompiledDataset(str(path)).num_frames % 2 == 1, "the dataset should have an odd number of frames"
    return path


@pytest.fixture(scope="module")
def launches(data, tmp_path_factory) -> dict[str, Any]:
    """Launch 1: every rank reads the epoch, then stops after STOP_AFTER batches and saves its loader's state.
    Launch 2 (a new torchrun, new processes): every rank loads its state and reads the rest."""
    out = tmp_path_factory.mktemp("torchrun")
    ran(torchrun(2, "full", data, out / "full"))
    ran(torchrun(2, "resume", data, out / "resume", "--states", out / "full"))
    return {mode: {r: json.loads((out / mode / f"{mode}-rank{r}.json").read_text()) for r in (0, 1)}
            for mode in ("full", "resume")} | {"dir": out}


def epoch_order(path: Path) -> list[int]:
    """Every frame index in the epoch's order: its shuffled shard order, episodes and frames in file order."""
    m = CompiledDataset(str(path)).manifest
    order = []
    for s in epoch_slices(m, seed=SEED, epoch=EPOCH, shuffle=True):
        for e in s.episodes:
            entry = m.episode(int(e))
            order.extend(range(entry.from_index, entry.to_index))
    return order


def flat(batches: list[list[list[int]]]) -> list[int]:
    return [sample[0] for batch in batches for sample in batch]


@pytest.mark.parametrize("workers", WORKERS)
def test_equal_steps_disjoint_ranks_cover_the_epoch(data, launches, workers):
    ranks = {r: launches["full"][r]["runs"][str(workers)] for r in (0, 1)}
    order = epoch_order(data)
    n = len(order)
    assert sorted(order) == list(range(n)) == list(range(ranks[0]["world"]["num_frames"]))
    q = n // 2
    steps = -(-q // BATCH)
    m = CompiledDataset(str(data)).manifest
    for r, run in ranks.items():
        assert len(run["batches"]) == run["len_loader"] == steps  # len(loader) is what comes out
        assert run["reduced"] == [2] * steps  # every step's all-reduce met the other rank
        assert [len(b) for b in run["batches"]] == [BATCH] * (steps - 1) + [q - BATCH * (steps - 1)]
        got = flat(run["batches"])
        assert len(got) == len(set(got)) == q == run["world"]["len"]
        assert run["world"]["rank_samples"] == [q, q] and run["world"]["dropped"] == n % 2 == 1
        # rank r reads exactly its run of the epoch's order: frames [r*q, (r+1)*q)
        assert set(got) == set(order[r * q:(r + 1) * q])
        for index, episode, frame in (s for b in run["batches"] for s in b):  # the ids agree with the index
            assert index == m.episode(episode).from_index + frame
    both = flat(ranks[0]["batches"]) + flat(ranks[1]["batches"])
    assert len(both) == len(set(both)) == n - n % 2  # disjoint
    assert set(range(n)) - set(both) == set(order[2 * q:])  # the last N mod world_size frames, dropped
    # a rank's samples do not depend on num_workers (docs/reader.md)
    other = launches["full"][0]["runs"][str(WORKERS[0])]
    assert set(flat(other["batches"])) == set(flat(ranks[0]["batches"]))


def test_rank_and_world_come_from_torch_distributed(launches):
    for mode in ("full", "resume"):
        for r, report in launches[mode].items():
            assert (report["rank"], report["world_size"]) == (r, 2)
            assert report["env"]["RANK"] == str(r) and report["env"]["WORLD_SIZE"] == "2"
            for run in report["runs"].values():
                w = run["world"]
                assert (w["given_rank"], w["given_world_size"]) == (None, None)  # nothing passed
                assert (w["rank"], w["world_size"]) == (r, 2)


@pytest.mark.parametrize("workers", WORKERS)
def test_resume_in_a_new_launch_yields_exactly_the_rest(launches, workers):
    for r in (0, 1):
        full = launches["full"][r]["runs"][str(workers)]
        rest = launches["resume"][r]["runs"][str(workers)]["rest"]
        assert full["first"] == full["batches"][:STOP_AFTER]
        assert rest == full["batches"][STOP_AFTER:]  # same samples, same batches, same order
        assert len(rest) == len(full["batches"]) - STOP_AFTER > 0
        state = full["state"]
        assert (state["epoch"], state["batches"], state["world_size"], state["num_workers"]) == \
            (EPOCH, STOP_AFTER, 2, max(1, workers))


@pytest.mark.parametrize("workers", WORKERS)
def test_resume_with_another_world_size_fails_clearly(data, launches, workers, tmp_path):
    proc = torchrun(1, "resume", data, tmp_path / "out", "--states", launches["dir"] / "full", "--state-rank", "0",
                    "--workers", str(workers))
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-6000:]
    w = max(1, workers)
    assert (f"ValueError: the state was saved with world_size=2, num_workers={w}; this run has world_size=1, "
            f"num_workers={w}: resume needs the same") in text, text[-6000:]
    assert not list((tmp_path / "out").glob("resume-rank*.json"))  # it never got through the epoch
