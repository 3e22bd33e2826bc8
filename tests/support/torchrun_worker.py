"""One DDP rank, launched by torchrun (tests/test_reader_torchrun.py): reads a compiled dataset through
``roboreel.loader`` with rank and world size left to ``torch.distributed`` and writes what it saw as JSON.

    python -m torch.distributed.run --standalone --nproc_per_node N tests/support/torchrun_worker.py \\
        {full,resume} DATA OUT --workers 0,2 --batch-size 4 --epoch 1 --seed 7 --stop-after 3

- ``full``: per ``--workers`` value, one uninterrupted epoch, then a fresh dataset and loader that stop after
  ``--stop-after`` batches and save ``loader.state_dict()`` to ``OUT/state-w{W}-rank{R}.json``.
- ``resume``: per ``--workers`` value, a fresh dataset and loader load ``--states``/state-w{W}-rank{R}.json (rank
  0's when ``--state-rank 0``) and read the rest of the epoch. A state saved with another world size makes the
  iteration raise ValueError; it is left to propagate (a traceback, a non-zero exit).

Every rank writes ``OUT/{mode}-rank{R}.json``. Each step all-reduces a counter, as a DDP step would: a rank with
fewer batches than another would leave that one blocked (the process group's timeout then ends the run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import roboreel


def dataset(path: str, args: argparse.Namespace) -> Any:
    # no rank= / world_size=: both must come from torch.distributed
    return roboreel.CompiledDataset(path, episode_pool_size=2, seed=args.seed, return_uint8=True,
                                    batch_size=args.batch_size)


def sample_ids(batch: dict[str, Any]) -> list[list[int]]:
    """[index, episode_index, frame_index] of every sample of a batch."""
    cols = [batch[k].reshape(-1).tolist() for k in ("index", "episode_index", "frame_index")]
    return [list(map(int, row)) for row in zip(*cols, strict=True)]


def step() -> int:
    """A DDP step's collective: every rank must call it the same number of times."""
    t = torch.ones(1)
    dist.all_reduce(t)
    return int(t.item())


def world_of(ds: Any) -> dict[str, Any]:
    w = ds._world()  # what the dataset resolved (roboreel/reader/plan/_epoch.py detect_rank)
    return {"rank": w.rank, "world_size": w.world_size, "given_rank": ds.rank, "given_world_size": ds.world_size,
            "len": len(ds), "rank_samples": ds.rank_samples(), "dropped": ds.dropped_samples(),
            "num_frames": ds.num_frames}


def full(args: argparse.Namespace, workers: int, out: Path) -> dict[str, Any]:
    ds = dataset(args.data, args)
    dl = roboreel.loader(ds, mix_workers=False, batch_size=args.batch_size, num_workers=workers, decode_threads=1)
    dl.set_epoch(args.epoch)
    length = len(dl)
    batches, reduced = [], []
    for b in dl:
        batches.append(sample_ids(b))
        reduced.append(step())
    dl.close()
    # the same stream again, stopped after k batches as a killed job would be; the state saved as a trainer would
    ds2 = dataset(args.data, args)
    dl2 = roboreel.loader(ds2, mix_workers=False, batch_size=args.batch_size, num_workers=workers, decode_threads=1)
    dl2.set_epoch(args.epoch)
    it = iter(dl2)
    first = []
    for _ in range(args.stop_after):
        first.append(sample_ids(next(it)))
        step()
    state = dl2.state_dict()
    (out / f"state-w{workers}-rank{dist.get_rank()}.json").write_text(json.dumps(state))
    del it
    dl2.close()
    return {"world": world_of(ds), "len_loader": length, "batches": batches, "reduced": reduced, "first": first,
            "state": state}


def resume(args: argparse.Namespace, workers: int, out: Path) -> dict[str, Any]:
    rank = dist.get_rank() if args.state_rank is None else args.state_rank
    state = json.loads((Path(args.states) / f"state-w{workers}-rank{rank}.json").read_text())
    ds = dataset(args.data, args)
    dl = roboreel.loader(ds, mix_workers=False, batch_size=args.batch_size, num_workers=workers, decode_threads=1)
    dl.load_state_dict(state)
    dl.set_epoch(args.epoch)  # a trainer's loop sets the epoch it resumes: the loaded position is kept
    rest = []
    for b in dl:
        rest.append(sample_ids(b))
        step()
    dl.close()
    return {"world": world_of(ds), "rest": rest}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["full", "resume"])
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("--workers", default="0")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--epoch", type=int, default=1)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--stop-after", type=int, default=3)
    p.add_argument("--states", default=None)
    p.add_argument("--state-rank", type=int, default=None)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"rank": dist.get_rank(), "world_size": dist.get_world_size(),
                              "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")},
                              "runs": {}}
    for w in [int(x) for x in args.workers.split(",")]:
        report["runs"][str(w)] = (full if args.mode == "full" else resume)(args, w, out)
        dist.barrier()
    (out / f"{args.mode}-rank{dist.get_rank()}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
