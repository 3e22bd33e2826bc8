"""The batches ``roboreel lerobot-train`` trains on are lerobot-train's own: the dataset built from a compiled
dataset (integrations/lerobot/datasets.py) against LeRobot's ``make_train_eval_datasets`` on the source, for the
same training config: same keys, shapes and dtypes per batch, and each sample equal to LeRobot's sample of the
same index (tabular values exactly, frames by pixel code). Also: the resume position of ``--resume``."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest
import torch

pytest.importorskip("lerobot.scripts.lerobot_train", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

from lerobot.configs.default import DatasetConfig  # noqa: E402
from lerobot.configs.train import TrainPipelineConfig  # noqa: E402
from lerobot.datasets.factory import make_train_eval_datasets as lerobot_datasets  # noqa: E402
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig  # noqa: E402
from lerobot.utils.constants import IMAGENET_STATS  # noqa: E402
from lerobot_support import REPO_ID, lerobot_pair_fixture  # noqa: E402, F401
from support.datasets import assert_same_sample, batch_indices  # noqa: E402
from support.resume import assert_same_batches  # noqa: E402

from roboreel.compile import CompileSettings  # noqa: E402
from roboreel.integrations.lerobot.datasets import make_train_eval_datasets as roboreel_datasets  # noqa: E402
from roboreel.reader import CompiledDataset  # noqa: E402

BATCH = 4


def _cfg(root, **kw) -> TrainPipelineConfig:
    # diffusion: windows on the state, the camera (2 observation steps) and the action (horizon 8)
    policy = DiffusionConfig(device="cpu", pretrained_backbone_weights=None, crop_shape=(40, 56), n_obs_steps=2,
                             horizon=8, n_action_steps=4, push_to_hub=False)
    return TrainPipelineConfig(dataset=DatasetConfig(repo_id=REPO_ID, root=str(root)), policy=policy,
                               batch_size=BATCH, seed=5, num_workers=0, **kw)


def test_batches_are_lerobot_trains_batches(lerobot_pair):
    source, compiled = lerobot_pair
    mine, none = roboreel_datasets(_cfg(compiled))
    theirs, _ = lerobot_datasets(_cfg(source))
    assert none is None and isinstance(mine, CompiledDataset)
    assert mine.delta_timestamps == theirs.delta_timestamps and mine.delta_timestamps["observation.images.top"]
    assert (mine.num_frames, mine.num_episodes) == (theirs.num_frames, theirs.num_episodes)
    for key in theirs.meta.camera_keys:  # use_imagenet_stats, as LeRobot's factory does
        for name, value in IMAGENET_STATS.items():
            assert torch.equal(mine.meta.stats[key][name], theirs.meta.stats[key][name])
            assert torch.equal(mine.meta.stats[key][name], torch.tensor(value, dtype=torch.float32))

    loader = torch.utils.data.DataLoader(mine, batch_size=BATCH)
    assert len(loader) == math.ceil(len(mine) / BATCH)
    their_batch = next(iter(torch.utils.data.DataLoader(theirs, batch_size=BATCH)))
    batches = list(loader)
    assert len(batches) == len(loader)
    for batch in batches[:2]:
        assert list(batch) == list(their_batch)
        for key, want in their_batch.items():
            got = batch[key]
            if isinstance(want, torch.Tensor):
                assert (got.shape, got.dtype) == (want.shape, want.dtype), key
            else:
                assert type(got) is type(want) and len(got) == len(want), key
        assert batch["observation.images.top"].dtype == torch.uint8
    cams = theirs.meta.camera_keys
    for batch in batches:  # every sample of the epoch, windows and camera frames included
        for i, index in enumerate(batch_indices(batch)):
            sample = {k: v[i] for k, v in batch.items()}
            # pixel codes do not survive every AV1 encode at 48x64: frames held to the fidelity floor instead
            assert_same_sample(sample, theirs[index], cams, min_psnr=CompileSettings().min_psnr)
    seen = [i for b in batches for i in batch_indices(b)]
    assert sorted(seen) == list(range(theirs.num_frames))  # one epoch: every frame once


def test_resume_continues_after_the_checkpointed_step(lerobot_pair, tmp_path):
    _, compiled = lerobot_pair
    uninterrupted, _ = roboreel_datasets(_cfg(compiled))
    stream = [batch_indices(b) for e in (0, 1) for b in _epoch(uninterrupted, e)]
    per_epoch = math.ceil(len(uninterrupted) / BATCH)
    for step in (3, per_epoch + 2):  # inside the first epoch, then inside the second
        checkpoint = tmp_path / f"ckpt{step}"
        (checkpoint / "training_state").mkdir(parents=True)
        (checkpoint / "training_state/training_step.json").write_text(
            json.dumps({"step": step, "num_processes": 1, "batch_size": BATCH}))
        cfg = _cfg(compiled, resume=True)
        cfg.checkpoint_path = checkpoint
        resumed, _ = roboreel_datasets(cfg)
        assert resumed.epoch == step // per_epoch
        got = [batch_indices(b) for b in torch.utils.data.DataLoader(resumed, batch_size=BATCH)]
        assert got == stream[step:(step // per_epoch + 1) * per_epoch]

    (checkpoint / "training_state/training_step.json").write_text(
        json.dumps({"step": 3, "num_processes": 1, "batch_size": 8}))
    with pytest.raises(ValueError, match="written with batch_size=8; this run has batch_size=4"):
        roboreel_datasets(cfg)



def test_resume_refuses_another_worker_count(lerobot_pair, tmp_path):
    """Each DataLoader worker reads its own stream, so an epoch's order depends on the worker count; LeRobot
    lets ``--num_workers`` with ``--resume`` override the checkpoint's, which would repeat and skip
    samples."""
    _, compiled = lerobot_pair
    (tmp_path / "training_state").mkdir()
    (tmp_path / "training_state/training_step.json").write_text(
        json.dumps({"step": 3, "num_processes": 1, "batch_size": BATCH}))
    (tmp_path / "pretrained_model").mkdir()
    cfg = _cfg(compiled, resume=True)
    cfg.checkpoint_path = tmp_path
    for saved, now in ((2, 0), (0, 2), (2, 3)):
        (tmp_path / "pretrained_model/train_config.json").write_text(json.dumps({"num_workers": saved}))
        cfg.num_workers = now
        want = f"written with num_workers={saved}; this run has num_workers={now}"
        with pytest.raises(ValueError, match=want):
            roboreel_datasets(cfg)
    stream = [batch_indices(b) for b in _epoch(roboreel_datasets(_cfg(compiled))[0], 0)]
    for saved, now in ((1, 0), (0, 1), (2, 2)):  # 0 and 1 workers read one stream
        (tmp_path / "pretrained_model/train_config.json").write_text(json.dumps({"num_workers": saved}))
        cfg.num_workers = now
        resumed, _ = roboreel_datasets(cfg)
        if now < 2:
            got = [batch_indices(b) for b in torch.utils.data.DataLoader(resumed, batch_size=BATCH)]
            assert got == stream[3:]

def _epoch(ds, epoch, **kw):
    ds.set_epoch(epoch)
    return list(torch.utils.data.DataLoader(ds, batch_size=BATCH, **kw))


def test_unsupported_options_are_refused_by_name(lerobot_pair):
    _, compiled = lerobot_pair
    cfg = _cfg(compiled)
    cfg.dataset = dataclasses.replace(cfg.dataset, root=None)
    with pytest.raises(ValueError, match="needs --dataset.root"):
        roboreel_datasets(cfg)
    cfg = _cfg(compiled)
    cfg.dataset = dataclasses.replace(cfg.dataset, eval_split=0.9)
    with pytest.raises(ValueError, match="eval_split=0.9 leaves 0 training episodes of 6"):
        roboreel_datasets(cfg)


@pytest.mark.parametrize("episodes", [None, [0, 1, 2, 4, 5]])
def test_eval_split_holds_out_lerobots_episodes(lerobot_pair, episodes):
    source, compiled = lerobot_pair
    mine, theirs = _cfg(compiled), _cfg(source)
    for cfg in (mine, theirs):
        cfg.dataset = dataclasses.replace(cfg.dataset, eval_split=0.4, episodes=episodes)
    (train, held_out), (want_train, want_eval) = roboreel_datasets(mine), lerobot_datasets(theirs)
    assert (train.episodes, held_out.episodes) == (sorted(want_train.episodes), sorted(want_eval.episodes))
    assert held_out.episodes and not set(train.episodes) & set(held_out.episodes)
    assert held_out.shuffle is False and held_out.image_transforms is None
    seen = [i for b in torch.utils.data.DataLoader(held_out, batch_size=BATCH) for i in batch_indices(b)]
    assert seen == sorted(i for e in held_out.episodes for i in _frames(held_out, e))  # file order, every frame


def _frames(ds, episode):
    row = ds.meta.episodes[episode]
    return range(row["dataset_from_index"], row["dataset_to_index"])


def test_a_remote_root_gives_the_same_batches(lerobot_pair):
    from support.httpserver import FaultyServer

    _, compiled = lerobot_pair
    local, _ = roboreel_datasets(_cfg(compiled))
    want = [batch_indices(b) for b in itertools.islice(torch.utils.data.DataLoader(local, batch_size=BATCH), 3)]
    with FaultyServer(compiled) as server:
        remote, _ = roboreel_datasets(_cfg(server.url))
        assert remote.meta.features == local.meta.features and remote.meta.repo_id == REPO_ID
        got = [batch_indices(b) for b in itertools.islice(torch.utils.data.DataLoader(remote, batch_size=BATCH), 3)]
    assert got == want


def _prepared(ds, loader, **kw):
    """``accelerator.prepare(DataLoader(ds))`` as lerobot-train calls it, with ``--roboreel.loader=loader``."""
    from accelerate import Accelerator

    from roboreel.integrations.lerobot.launch import patched
    from roboreel.integrations.lerobot.options import LoaderOptions

    with patched(LoaderOptions(loader=loader)):
        return Accelerator(cpu=True).prepare(torch.utils.data.DataLoader(ds, batch_size=BATCH, **kw))


# lerobot-train's worker options (spawn, prefetch_factor 4), without its persistent workers: their shutdown when
# roboreel.loader's inner DataLoader is collected waits out torch's 2 x 5 s join timeout (the lerobot-train runs
# in test_lerobot_train.py use them; across epochs they are tests/test_reader_gpu.py's)
WORKERS = {0: {}, 2: {"num_workers": 2, "multiprocessing_context": "spawn", "persistent_workers": False,
                      "prefetch_factor": 4}}


@pytest.mark.parametrize(("loader", "workers"), [("stage", 0), ("stage", 2), ("dataloader", 0)])
def test_every_pass_through_the_prepared_loader_is_a_new_epoch(lerobot_pair, loader, workers):
    from lerobot.utils.utils import cycle

    from roboreel.integrations.lerobot.loading import StageLoader

    _, compiled = lerobot_pair
    ds, _ = roboreel_datasets(_cfg(compiled))
    prepared = _prepared(ds, loader, **WORKERS[workers])
    assert isinstance(prepared, StageLoader) is (loader == "stage")
    per_epoch = len(prepared)
    assert per_epoch == math.ceil(ds.num_frames / BATCH)
    got = list(itertools.islice(cycle(prepared), 2 * per_epoch))  # as lerobot-train loops
    fresh, _ = roboreel_datasets(_cfg(compiled))
    want = [b for e in (0, 1) for b in _epoch(fresh, e, **WORKERS[workers])]
    assert_same_batches(got, want)  # keys, order, dtypes (uint8 frames), every value
    indices = [batch_indices(b) for b in got]
    assert indices[:per_epoch] != indices[per_epoch:]  # reshuffled


def test_the_stage_loader_resumes_where_the_checkpointed_step_left_off(lerobot_pair, tmp_path):
    _, compiled = lerobot_pair
    stream = [b for e in (0, 1) for b in _epoch(roboreel_datasets(_cfg(compiled))[0], e)]
    per_epoch = math.ceil(len(roboreel_datasets(_cfg(compiled))[0]) / BATCH)
    step = per_epoch + 2  # inside the second epoch
    (tmp_path / "training_state").mkdir()
    (tmp_path / "training_state/training_step.json").write_text(
        json.dumps({"step": step, "num_processes": 1, "batch_size": BATCH}))
    cfg = _cfg(compiled, resume=True)
    cfg.checkpoint_path = tmp_path
    prepared = _prepared(roboreel_datasets(cfg)[0], "stage")
    assert prepared.iteration == 1
    got = list(itertools.islice(iter(prepared), 3))
    assert_same_batches(got, stream[step:step + 3])
    assert (prepared.state_dict()["epoch"], prepared.state_dict()["batches"]) == (1, 2 + 3)  # counts on


def test_a_language_collate_keeps_the_dataloader(lerobot_pair, caplog):
    from accelerate.data_loader import DataLoaderShard
    from lerobot.utils.collate import lerobot_collate_fn

    _, compiled = lerobot_pair
    ds, _ = roboreel_datasets(_cfg(compiled))
    prepared = _prepared(ds, "stage", collate_fn=lerobot_collate_fn)  # lerobot-train's, with language columns
    assert isinstance(prepared, DataLoaderShard)
    assert "the decode stage cannot read this DataLoader (a custom collate_fn ('lerobot_collate_fn'))" in caplog.text
