"""The data side of a ``roboreel lerobot-train`` step, per loader (``--roboreel.loader``), without the model.

lerobot-train's own step is ``next(dl_iter)``, uint8 cameras to float / 255, the preprocessor, then the policy's
forward/backward. This builds the loader exactly as ``roboreel lerobot-train`` does (roboreel's
``make_train_eval_datasets`` for the policy's delta timestamps, lerobot_train's DataLoader arguments and worker
options, ``accelerator.prepare`` with roboreel's patch) and times the first part over ``--batches`` batches after
``--warmup``: wall seconds and CPU seconds of the whole process tree (this process, its threads, the DataLoader
workers) per batch, and the reader's own decode seconds per sample (wall time inside decode calls, summed over
threads and workers: inflated on a busy machine). On a CPU-only trainer the CPU seconds are taken from the
model; on a GPU trainer the wall seconds are what the step may wait for. Runs in LeRobot's venv:

    PYTHONPATH=$PWD .venv-lerobot/bin/python benchmarks/lerobot_train_data_step.py data/aloha-rr \\
        --loader stage --batch-size 8 --num-workers 2 --batches 100
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time

import psutil
import torch


def tree_cpu_seconds() -> float:
    """user + system seconds of this process and its live children (the DataLoader workers)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += sum(child.cpu_times()[:2])
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", help="a compiled dataset")
    ap.add_argument("--loader", choices=("stage", "dataloader"), default="stage")
    ap.add_argument("--policy", default="act", help="the policy whose delta timestamps shape the samples")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--decode-threads", type=int, default=None)
    args = ap.parse_args()

    from accelerate import Accelerator
    from lerobot.configs.default import DatasetConfig
    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.policies.factory import make_policy_config
    from lerobot.scripts.lerobot_train import _dataloader_worker_kwargs
    from lerobot.utils.utils import cycle

    from roboreel.integrations.lerobot.datasets import make_train_eval_datasets
    from roboreel.integrations.lerobot.launch import patched
    from roboreel.integrations.lerobot.options import LoaderOptions

    policy = make_policy_config(args.policy, device="cpu", pretrained_backbone_weights=None, push_to_hub=False)
    cfg = TrainPipelineConfig(dataset=DatasetConfig(repo_id="local/bench", root=args.root), policy=policy,
                              batch_size=args.batch_size, num_workers=args.num_workers, seed=1000)
    dataset, _ = make_train_eval_datasets(cfg)
    dataloader = torch.utils.data.DataLoader(dataset, num_workers=cfg.num_workers, batch_size=cfg.batch_size,
                                             shuffle=False, pin_memory=False, drop_last=False,
                                             **_dataloader_worker_kwargs(cfg))  # as lerobot_train builds it
    with patched(LoaderOptions(loader=args.loader, decode_threads=args.decode_threads)):
        prepared = Accelerator(cpu=True).prepare(dataloader)
    batches = cycle(prepared)
    cameras = dataset.meta.camera_keys

    def step() -> None:
        batch = next(batches)
        for key in cameras:  # what lerobot-train does with every batch before the preprocessor
            batch[key] = batch[key].to(dtype=torch.float32) / 255.0

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    first = time.perf_counter() - t0
    cpu0, t0 = tree_cpu_seconds(), time.perf_counter()
    for _ in itertools.repeat(None, args.batches):
        step()
    wall, cpu = time.perf_counter() - t0, tree_cpu_seconds() - cpu0
    stats = dataset.stats()  # both processes' counters (workers flush theirs every 0.2 s): the whole run, nearly
    per_sample = 1000 * stats["decode_seconds"] / max(1, stats["samples"])
    print(json.dumps({"loader": args.loader, "type": type(prepared).__name__, "batch_size": args.batch_size,
                      "num_workers": args.num_workers, "batches": args.batches,
                      "warmup_seconds": round(first, 2), "batches_per_s": round(args.batches / wall, 2),
                      "samples_per_s": round(args.batches * args.batch_size / wall, 1),
                      "ms_per_batch": round(1000 * wall / args.batches, 1),
                      "cpu_ms_per_batch": round(1000 * cpu / args.batches, 1),
                      "decode_ms_per_sample": round(per_sample, 2)}))


if __name__ == "__main__":
    main()
