"""``roboreel lerobot-train`` is LeRobot's lerobot-train on a compiled dataset. Real runs of a tiny ACT through
train_probe.py (which records the batches LeRobot's loop takes and the loader they came from), on the default
loader (the decode stage, ``roboreel.loader``) unless a test says otherwise: 0 and 2 workers (with held-out
episodes evaluated), both loaders giving the loop the same batches bit for bit, a ``--resume`` that continues
the data stream exactly, and a 2-process ``accelerate launch`` on the CPU (gloo) where each rank reads its own
split: disjoint samples, the same number of steps, no hang. The expected streams are CompiledDataset's own,
built here with the arguments the adapter must have used."""

from __future__ import annotations

import itertools
import json
import re
import sys

import pytest

pytest.importorskip("lerobot.scripts.lerobot_train", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")
pytest.importorskip("accelerate", reason="lerobot-train needs accelerate")

import torch  # noqa: E402
from lerobot_support import ACT_CHUNK, REPO_ID, TINY_ACT, free_port, lerobot_pair_fixture, run_train  # noqa: E402, F401
from support.datasets import batch_indices  # noqa: E402

from roboreel.integrations.lerobot.datasets import split_episodes  # noqa: E402
from roboreel.reader import CompiledDataset, DatasetMeta  # noqa: E402

BATCH, SEED, FPS = 4, 7, 10


STAGE, DATALOADER = "StageLoader", "DataLoaderShard"  # what accelerator.prepare returned, per --roboreel.loader


def _args(compiled, out, *, steps, workers, loader=None):
    return [*([f"--roboreel.loader={loader}"] if loader else []), *TINY_ACT, f"--dataset.root={compiled}", f"--dataset.repo_id={REPO_ID}", f"--batch_size={BATCH}",
            f"--num_workers={workers}", f"--steps={steps}", "--log_freq=1", f"--seed={SEED}", f"--output_dir={out}",
            "--wandb.enable=false"]


def _expected(compiled, n, *, rank=0, world_size=1, workers=0, episodes=None):
    """The first ``n`` batches' sample indices of the stream the adapter must build for this rank."""
    ds = CompiledDataset(str(compiled), delta_timestamps={"action": [i / FPS for i in range(ACT_CHUNK)]},
                         return_uint8=True, seed=SEED, batch_size=BATCH, rank=rank, world_size=world_size,
                         episodes=episodes)
    ds.set_epoch(0)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=workers,
                                         multiprocessing_context="spawn" if workers else None)
    return [batch_indices(b) for b in itertools.islice(loader, n)]


def _indices(run, rank=0):
    return [b["index"] for b in run.batches(rank)]


def _loaders(run, rank=0):
    return {b["loader"] for b in run.batches(rank)}


def _ok(run):
    assert run.returncode is not None, f"killed after the timeout (hung?):\n{run.log[-3000:]}"
    assert run.returncode == 0, run.log[-3000:]


def test_train_then_resume_without_workers(lerobot_pair, tmp_path):
    _, compiled = lerobot_pair
    out = tmp_path / "out"
    first = run_train(_args(compiled, out, steps=2, workers=0), tmp_path / "probe1")
    _ok(first)
    assert "step:1 " in first.log and "step:2 " in first.log and "End of training" in first.log
    want = _expected(compiled, 3)
    assert _indices(first) == want[:2] and _loaders(first) == {STAGE}
    spec = first.batches()[0]["spec"]
    assert spec["observation.images.top"] == [[BATCH, 3, 48, 64], "torch.uint8"]
    assert spec["action"] == [[BATCH, ACT_CHUNK, 6], "torch.float32"]
    assert spec["action_is_pad"] == [[BATCH, ACT_CHUNK], "torch.bool"]
    config = out / "checkpoints/000002/pretrained_model/train_config.json"
    assert json.loads(config.read_text())["dataset"]["root"] == str(compiled)

    resumed = run_train([f"--config_path={config}", "--resume=true", "--steps=3", "--log_freq=1"],
                        tmp_path / "probe2")
    _ok(resumed)
    assert "resuming the data stream at epoch 0, batch 2 (step 2)" in resumed.log
    assert "step:3 " in resumed.log and "step:2 " not in resumed.log
    assert _indices(resumed) == want[2:3]  # the batch an uninterrupted run takes third
    assert _loaders(resumed) == {STAGE}
    assert (out / "checkpoints/000003/pretrained_model/model.safetensors").exists()


def test_both_loaders_train_with_two_workers_and_held_out_episodes_on_the_same_batches(lerobot_pair, tmp_path):
    _, compiled = lerobot_pair
    extra = ["--dataset.eval_split=0.4", "--eval_steps=2"]
    train, _ = split_episodes(DatasetMeta(str(compiled)), None, 0.4)
    want = _expected(compiled, 2, workers=2, episodes=train)
    runs = {}
    for loader, kind in ((None, STAGE), ("dataloader", DATALOADER)):
        run = run_train(_args(compiled, tmp_path / kind, steps=2, workers=2, loader=loader) + extra,
                        tmp_path / f"probe-{kind}")
        _ok(run)
        assert "step:2 " in run.log and "step 2: eval_loss=" in run.log  # the held-out episodes were read
        assert _indices(run) == want and _loaders(run) == {kind}
        runs[kind] = run
    stage, dataloader = (runs[k].batches() for k in (STAGE, DATALOADER))
    for got, expect in zip(stage, dataloader, strict=True):  # keys in order, shapes, dtypes, every value
        assert list(got["digest"]) == list(expect["digest"]) and got["spec"] == expect["spec"]
        assert got["digest"] == expect["digest"]
    assert stage[0]["spec"]["observation.images.top"] == [[BATCH, 3, 48, 64], "torch.uint8"]
    eval_losses = [re.search(r"step 2: eval_loss=(\S+)", runs[k].log).group(1) for k in (STAGE, DATALOADER)]
    assert eval_losses[0] == eval_losses[1]  # same batches, same seed: the same model evaluated on the same data


def test_mix_workers_takes_every_workers_share_into_each_batch(lerobot_pair, tmp_path):
    """--roboreel.mix_workers=true: each batch is one DataLoader batch of BATCH / 2 from each of the 2 workers,
    joined (roboreel.loader's mix_workers), so it holds both workers' episodes."""
    _, compiled = lerobot_pair
    run = run_train(_args(compiled, tmp_path / "out", steps=2, workers=2) + ["--roboreel.mix_workers=true"],
                    tmp_path / "probe")
    _ok(run)
    ds = CompiledDataset(str(compiled), delta_timestamps={"action": [i / FPS for i in range(ACT_CHUNK)]},
                         return_uint8=True, seed=SEED, batch_size=BATCH)
    ds.set_epoch(0)
    halves = [batch_indices(b) for b in itertools.islice(torch.utils.data.DataLoader(
        ds, batch_size=BATCH // 2, num_workers=2, multiprocessing_context="spawn"), 4)]
    assert _indices(run) == [halves[0] + halves[1], halves[2] + halves[3]] and _loaders(run) == {STAGE}


def _two_ranks(args: list[str], probe):
    """lerobot-train with ``args`` on two accelerate ranks, finished successfully; a failure when accelerate starts
    fewer (these tests are about two ranks: one rank must not pass for two). `accelerate launch --cpu --num_processes 2`
    starts ONE process (accelerate 1.15's simple launcher: multi-CPU needs mpirun); --multi_gpu launches through
    torchrun, and with --policy.device=cpu every rank runs on the CPU (DistributedType.MULTI_CPU, gloo)."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", str(free_port())]
    run = run_train(args, probe, launcher=launcher)
    if run.started() < 2:
        pytest.fail(f"accelerate started {run.started()} of 2 processes:\n{run.log[-2000:]}")
    _ok(run)
    return run


def test_accelerate_two_processes_read_disjoint_splits_in_equal_steps(lerobot_pair, tmp_path):
    _, compiled = lerobot_pair
    steps = 3
    run = _two_ranks(_args(compiled, tmp_path / "out", steps=steps, workers=0), tmp_path / "probe")
    assert "Effective batch size: 4 x 2 = 8" in run.log and f"step:{steps} " in run.log
    ranks = [_indices(run, r) for r in (0, 1)]
    assert [len(r) for r in ranks] == [steps, steps]  # one batch per step on every rank
    assert _loaders(run, 0) == _loaders(run, 1) == {STAGE}
    seen = [set(i for b in r for i in b) for r in ranks]
    assert all(len(s) == steps * BATCH for s in seen) and not seen[0] & seen[1]
    for rank in (0, 1):  # each rank read its own split (not rank 0's stream sliced, not everything)
        assert ranks[rank] == _expected(compiled, steps, rank=rank, world_size=2)
    lengths = [len(CompiledDataset(str(compiled), seed=SEED, batch_size=BATCH, rank=r, world_size=2)) for r in (0, 1)]
    assert lengths[0] == lengths[1]  # equal steps per epoch


def _expected_mixture(compiled, n, weights, *, rank=0, world_size=1):
    """The first ``n`` batches' (dataset_index, index) of the mixture stream the adapter must build."""
    ds = CompiledDataset([str(compiled), str(compiled)], weights=weights,
                         delta_timestamps={"action": [i / FPS for i in range(ACT_CHUNK)]}, return_uint8=True,
                         seed=SEED, batch_size=BATCH, rank=rank, world_size=world_size)
    return [list(zip([int(i) for i in b["dataset_index"]], batch_indices(b), strict=True))
            for b in itertools.islice(torch.utils.data.DataLoader(ds, batch_size=BATCH), n)]


def _mixture_args(compiled, out, *, steps):
    args = _args(compiled, out, steps=steps, workers=0)
    return [a if not a.startswith("--dataset.root=") else f"--dataset.root={compiled},{compiled}" for a in args] + [
        "--roboreel.weights=0.7,0.3"]


def _drawn(run, rank=0):
    return [list(zip(b["dataset_index"], b["index"], strict=True)) for b in run.batches(rank)]


def test_a_weighted_mixture_of_two_roots_trains_and_resumes(lerobot_pair, tmp_path):
    """--dataset.root=a,b --roboreel.weights=0.7,0.3 (one compiled dataset twice: dataset_index tells them apart)."""
    _, compiled = lerobot_pair
    out = tmp_path / "out"
    first = run_train(_mixture_args(compiled, out, steps=2), tmp_path / "probe1")
    _ok(first)
    want = _expected_mixture(compiled, 3, [0.7, 0.3])
    assert _drawn(first) == want[:2] and {d for b in want for d, _ in b} == {0, 1}
    config = out / "checkpoints/000002/pretrained_model/train_config.json"
    resumed = run_train([f"--config_path={config}", "--resume=true", "--steps=3", "--log_freq=1",
                         "--roboreel.weights=0.7,0.3"], tmp_path / "probe2")
    _ok(resumed)
    assert "resuming the data stream at epoch 0, batch 2 (step 2)" in resumed.log
    assert _drawn(resumed) == want[2:3]
    # --roboreel.weights is not in LeRobot's train_config.json: a resume without it would read another stream
    forgot = run_train([f"--config_path={config}", "--resume=true", "--steps=3"], tmp_path / "without-weights")
    assert forgot.returncode != 0 and not forgot.batches()
    assert "was written with --roboreel.weights=[0.7, 0.3] (this run: None)" in forgot.log


def test_accelerate_two_processes_read_a_mixture_in_equal_steps(lerobot_pair, tmp_path):
    _, compiled = lerobot_pair
    steps = 3
    run = _two_ranks(_mixture_args(compiled, tmp_path / "out", steps=steps), tmp_path / "probe")
    ranks = [_drawn(run, r) for r in (0, 1)]
    assert [len(r) for r in ranks] == [steps, steps]
    for rank in (0, 1):
        assert ranks[rank] == _expected_mixture(compiled, steps, [0.7, 0.3], rank=rank, world_size=2)
