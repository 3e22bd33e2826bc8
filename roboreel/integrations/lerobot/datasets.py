"""The dataset ``lerobot-train`` trains on, built by roboreel: a ``CompiledDataset`` where LeRobot builds a
``LeRobotDataset`` (lerobot 0.6.1 ``datasets/factory.py:make_train_eval_datasets``).

What LeRobot's factory does and this keeps: delta timestamps from the policy (``resolve_delta_timestamps``),
uint8 frames (lerobot-train divides camera keys by 255 itself), ``--dataset.episodes``, image transforms,
``--tolerance_s``, ImageNet stats written into ``meta.stats`` for non-depth cameras. What it changes: the order is
roboreel's episode-pool shuffle, seeded by ``--seed``, instead of LeRobot's EpisodeAwareSampler; the dataset is
iterable, so ``cfg.dataset.streaming`` is set to true (lerobot-train then builds its DataLoader without a sampler);
on ``--resume`` the stream continues after the last sample the checkpointed step consumed; ``--dataset.root=a,b``
(with ``--roboreel.weights=0.7,0.3`` or without: all frames once) trains on a mixture (reader/mixture/), robots
with other keys, sizes and fps made canonical by ``--roboreel.remap=FILE`` / ``--roboreel.pad=max``
(docs/mixtures.md); with
``--dataset.eval_split`` the held-out episodes are LeRobot's and are read in file order (all of them: LeRobot's
``--max_eval_samples`` subset needs its map-style dataset).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from roboreel.integrations.lerobot.options import read_mixture_file
from roboreel.reader.dataset import CompiledDataset
from roboreel.reader.meta import DatasetMeta
from roboreel.reader.mixture import MixtureDataset
from roboreel.reader.options import DecodeOptions
from roboreel.reader.plan import detect_rank

logger = logging.getLogger(__name__)


def make_train_eval_datasets(cfg: Any, *, weights: Sequence[float] | str | None = None, mixture: str | None = None,
                             pad: str | None = None) -> tuple[CompiledDataset, CompiledDataset | None]:
    """``lerobot.datasets.factory.make_train_eval_datasets`` for a compiled dataset at ``--dataset.root``: the
    training dataset, and with ``--dataset.eval_split`` the held-out one (LeRobot's split: the last
    ``ceil(n * eval_split)`` episodes of every task). ``--dataset.root=a,b`` trains on a mixture of compiled
    datasets, drawn with ``weights`` (``--roboreel.weights``; None: every frame of every root once per epoch), made
    canonical by the ``mixture`` file (``--roboreel.remap=FILE``) and ``pad`` (``--roboreel.pad``)."""
    from lerobot.datasets.factory import resolve_delta_timestamps

    data = cfg.dataset
    if cfg.resume:
        check_resumed_options(Path(cfg.checkpoint_path), mixture_options(weights, mixture, pad))
    roots = [r.strip() for r in str(data.root or "").split(",") if r.strip()]
    if len(roots) > 1 or weights is not None or mixture is not None or pad is not None:
        spec = read_mixture_file(mixture) if mixture is not None else {}
        if pad is not None:
            spec["pad"] = pad
        if weights is not None:
            spec["weights"] = weights
        return _mixture(cfg, roots, spec), None
    if not isinstance(data.repo_id, str):
        raise ValueError("roboreel lerobot-train trains on one dataset: pass one --dataset.repo_id")
    if not data.root:
        raise ValueError("roboreel lerobot-train needs --dataset.root=<compiled dataset> (a local path or URL; "
                         "compile one with `roboreel compile SRC OUT`)")
    url = str(data.root)
    meta = DatasetMeta(url, repo_id=data.repo_id)
    delta_timestamps = resolve_delta_timestamps(cfg.trainable_config, meta)
    train_episodes, eval_episodes = data.episodes, None
    if data.eval_split:
        train_episodes, eval_episodes = split_episodes(meta, data.episodes, data.eval_split)
        logger.info("roboreel: train/eval split: %d train, %d eval episodes (eval_split=%s)", len(train_episodes),
                    len(eval_episodes), data.eval_split)
    dataset = _dataset(cfg, url, delta_timestamps, train_episodes, train=True)
    evaluation = None if eval_episodes is None else _dataset(cfg, url, delta_timestamps, eval_episodes, train=False)
    data.streaming = True  # an iterable dataset: lerobot-train builds its DataLoader with no sampler, no shuffle
    if cfg.resume:
        resume(dataset, cfg)
    return dataset, evaluation


def _mixture(cfg: Any, roots: list[str], spec: dict[str, Any]) -> MixtureDataset:
    """The training mixture of ``roots`` (``--dataset.root=a,b``), canonical as ``spec`` says (remap, pad,
    normalize, weights: options.read_mixture_file); its meta merges theirs (reader/mixture/_meta.py). The policy's
    windows are its ``*_delta_indices`` in frames, each root on its own frame grid: LeRobot's
    ``resolve_delta_timestamps`` asked with fps 1 names the keys and gives the frame offsets."""
    from lerobot.datasets.factory import resolve_delta_timestamps

    data = cfg.dataset
    if len(roots) < 2:
        raise ValueError(f"--roboreel.weights, --roboreel.remap and --roboreel.pad mix several compiled datasets: "
                         f"pass them as --dataset.root=a,b (got {len(roots)} root)")
    if data.eval_split:
        raise ValueError("--dataset.eval_split is not supported with several --dataset.root yet: hold episodes "
                         "out per dataset when compiling, or train on one root")
    if data.episodes is not None:
        raise ValueError("--dataset.episodes names one dataset's episodes; with several --dataset.root it would "
                         "be ambiguous: select episodes in Python, CompiledDataset([a, b], episodes=[[...], None])")
    weights = spec.get("weights")
    if isinstance(weights, list | tuple):
        weights = tuple(float(w) for w in weights)
    dataset = _dataset(cfg, roots, None, None, train=True, weights=weights,
                       mixture={k: spec[k] for k in ("remap", "pad", "normalize") if spec.get(k) is not None})
    frames = resolve_delta_timestamps(cfg.trainable_config, SimpleNamespace(features=dataset.meta.features, fps=1))
    if frames:
        dataset.set_windows(delta_indices={k: [round(float(i)) for i in v] for k, v in frames.items()})
    data.streaming = True
    if cfg.resume:
        resume(dataset, cfg)
    return dataset


def split_episodes(meta: DatasetMeta, episodes: list[int] | None, eval_split: float) -> tuple[list[int], list[int]]:
    """LeRobot's train/eval split: episodes grouped by their first task, the last ``ceil(n * eval_split)`` of
    each group held out."""
    base = list(episodes) if episodes is not None else meta.episodes["episode_index"]
    tasks = dict(zip(meta.episodes["episode_index"], meta.episodes["tasks"], strict=True))
    by_task: dict[str, list[int]] = {}
    for episode in base:
        by_task.setdefault(tasks[episode][0] if tasks[episode] else "", []).append(episode)
    train, held_out = [], []
    for group in by_task.values():
        n_eval = math.ceil(len(group) * eval_split)
        train.extend(group[: len(group) - n_eval])
        held_out.extend(group[len(group) - n_eval :])
    if not train:
        raise ValueError(f"--dataset.eval_split={eval_split} leaves 0 training episodes of {len(base)}")
    return train, held_out


def _dataset(cfg: Any, url: str | list[str], delta_timestamps: dict[str, list[float]] | None,
             episodes: list[int] | None, *, train: bool, weights: Sequence[float] | str | None = None,
             mixture: dict[str, Any] | None = None) -> CompiledDataset:
    import torch
    from lerobot.transforms import ImageTransforms
    from lerobot.utils.constants import IMAGENET_STATS

    data = cfg.dataset
    rank, world_size = detect_rank(None, None)  # fixed here, so workers (spawned or forked) need not detect it
    dataset = CompiledDataset(
        url,
        delta_timestamps=delta_timestamps,
        episodes=episodes,
        image_transforms=ImageTransforms(data.image_transforms) if train and data.image_transforms.enable else None,
        return_uint8=True,
        seed=cfg.seed if cfg.seed is not None else 0,
        shuffle=train,  # evaluation reads in file order, as LeRobot's eval DataLoader (shuffle=False)
        rank=rank,
        world_size=world_size,
        batch_size=cfg.batch_size,  # whole batches per worker: len(DataLoader) exact, equal steps on every rank
        decode=DecodeOptions(tolerance_s=cfg.tolerance_s),
        **({"weights": weights} if weights is not None else {}),
        **(mixture or {}),
    )
    dataset.meta.repo_id = data.repo_id
    if data.use_imagenet_stats:
        stats = dataset.meta.stats
        if stats is None:
            raise ValueError(f"{url} has no meta/stats.json: lerobot-train normalises with it")
        for key in dataset.meta.camera_keys:
            if key in dataset.meta.depth_keys:
                continue
            for name, value in IMAGENET_STATS.items():
                stats.setdefault(key, {})[name] = torch.tensor(value, dtype=torch.float32)
    return dataset


def resume(dataset: CompiledDataset, cfg: Any) -> None:
    """Continue the stream after the samples the checkpoint's steps consumed (every rank: its own split).

    A step takes one batch per rank, and an epoch is exactly ``ceil(len(dataset) / batch_size)`` batches per rank
    (whole batches per worker), so step ``s`` is batch ``s % per_epoch`` of epoch ``s // per_epoch``. The state
    is the loader form ("batches" delivered this epoch, with lerobot-train's batch size and workers), which both
    loaders resume from: the DataLoader through the dataset, the stage loader (loading.StageLoader) through
    ``DeviceLoader.load_state_dict``, so it also counts its batches on from there. A batch size, world size or
    worker count other than the checkpoint's is refused (each worker reads its own stream)."""
    from lerobot.common.train_utils import (
        load_training_batch_size,
        load_training_num_processes,
        load_training_step,
    )
    from lerobot.utils.constants import TRAINING_STATE_DIR

    checkpoint = Path(cfg.checkpoint_path)
    step = load_training_step(checkpoint / TRAINING_STATE_DIR)
    world_size = detect_rank(dataset.rank, dataset.world_size)[1]
    saved = {"batch_size": load_training_batch_size(checkpoint),
             "num_processes": load_training_num_processes(checkpoint),
             "num_workers": saved_num_workers(checkpoint)}
    now = {"batch_size": cfg.batch_size, "num_processes": world_size, "num_workers": cfg.num_workers}
    if saved["num_workers"] is not None and max(1, saved["num_workers"]) == max(1, now["num_workers"]):
        saved["num_workers"] = now["num_workers"]  # 0 and 1 read one stream: the same order
    differ = {k: (saved[k], now[k]) for k in saved if saved[k] is not None and saved[k] != now[k]}
    if differ:
        raise ValueError(f"{checkpoint} was written with {', '.join(f'{k}={v[0]}' for k, v in differ.items())}; "
                         f"this run has {', '.join(f'{k}={v[1]}' for k, v in differ.items())}: roboreel resumes the "
                         "data stream exactly only with the same values")
    per_epoch = math.ceil(len(dataset) / cfg.batch_size)
    epoch, batches = divmod(step, per_epoch)
    dataset.set_epoch(epoch)
    loader = SimpleNamespace(batch_size=cfg.batch_size, drop_last=False, num_workers=cfg.num_workers)
    dataset.load_state_dict(dataset.state_dict(batches=batches, loader=loader))
    logger.info("roboreel: resuming the data stream at epoch %d, batch %d (step %d)", epoch, batches, step)


def saved_num_workers(checkpoint: Path) -> int | None:
    """``--num_workers`` of the run that wrote ``checkpoint`` (its ``pretrained_model/train_config.json``), or
    None where that file or value is absent. Each DataLoader worker reads its own stream, so the order of an
    epoch depends on the worker count: resuming with another one would repeat and skip samples of that
    epoch, and ``--num_workers`` given with ``--resume`` overrides the checkpoint's value without a word from
    LeRobot."""
    from lerobot.configs.train import TRAIN_CONFIG_NAME
    from lerobot.utils.constants import PRETRAINED_MODEL_DIR

    try:
        config = json.loads((checkpoint / PRETRAINED_MODEL_DIR / TRAIN_CONFIG_NAME).read_text())
        value = config.get("num_workers") if isinstance(config, dict) else None
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# in a checkpoint's training_state/, next to LeRobot's training_step.json
OPTIONS_FILE = "roboreel_options.json"


def mixture_options(weights: Sequence[float] | str | None, mixture: str | None,
                    pad: str | None) -> dict[str, Any]:
    """The ``--roboreel.*`` options that choose what a run reads (JSON-ready): LeRobot does not save them in
    its train_config.json, so a resume that leaves one out would read another stream without a word."""
    listed = list(weights) if isinstance(weights, tuple | list) else weights
    return {"weights": listed, "remap": mixture, "pad": pad}


def save_options(checkpoint: Path, options: dict[str, Any]) -> None:
    """Write ``options`` (mixture_options) into ``checkpoint``'s training_state/, for ``--resume`` to
    compare."""
    from lerobot.utils.constants import TRAINING_STATE_DIR

    (checkpoint / TRAINING_STATE_DIR / OPTIONS_FILE).write_text(json.dumps(options, sort_keys=True) + "\n")


def check_resumed_options(checkpoint: Path, options: dict[str, Any]) -> None:
    """Refuse a ``--resume`` whose ``--roboreel.weights`` / ``remap`` / ``pad`` differ from the checkpointed
    run's (a checkpoint written without them, by an older roboreel, is not checked)."""
    from lerobot.utils.constants import TRAINING_STATE_DIR

    try:
        saved = json.loads((checkpoint / TRAINING_STATE_DIR / OPTIONS_FILE).read_text())
    except (OSError, ValueError):
        return
    names = {"weights": "--roboreel.weights", "remap": "--roboreel.remap", "pad": "--roboreel.pad"}
    differ = [f"{names[k]}={saved.get(k)} (this run: {options[k]})" for k in names
              if saved.get(k) != options[k]]
    if differ:
        raise ValueError(f"{checkpoint} was written with {', '.join(differ)}: roboreel's options are not in "
                         "LeRobot's train_config.json; pass the checkpointed run's again with --resume")
