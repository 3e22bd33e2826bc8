"""What a frame costs to decode when clips are interleaved, as a shuffling loader must, against the decode ceiling.

The bench's decode ceiling (roboreel/bench/ceiling.py) decodes each clip front to back, one clip after another, one
process per core: the cheapest way to turn the clips into pixels. A training loader cannot read that way: every
batch mixes episodes (the pool), so each decode thread moves between several clips' decoders, a GOP run of one,
then a run of another, in a shuffled run order. This measures the CPU time per frame of both access patterns on
the same clips, in threads of one process (as ``roboreel.loader``'s decode stage runs them), with the stage's
heap settings and call size:

- ``sequential``: each thread decodes its clips one after another, front to back (the ceiling's pattern);
- ``runs``: the same clips, but each clip's GOP runs in a shuffled order (seeks, no interleaving);
- ``interleaved``: each thread takes one run of each of its clips in turn (the stage's pattern);
- ``interleaved+hwc``: that, and every frame copied into a slot of a [B, H, W, C] batch array (a memcpy: what the
  stage does with ``channels_last=True`` and when the batch goes to a GPU);
- ``interleaved+chw``: that, and every frame deinterleaved into a slot of a [B, C, H, W] batch array with the
  stage's own ``copy_frame`` (what the contract's contiguous CPU batches cost);
- ``lanes``: each thread keeps ``--open`` decoders going at once and decodes one frame of each in turn, every
  decoder moving forward (the default order, ``frame_order="shuffled"``, without its run cache); ``lanes+chw``
  with the copy;
- ``lanecalls``: the same, a decode call's frames of each decoder in turn (the default order with its run cache:
  a lane's next frames decoded with the asked one, up to one call); ``lanecalls+chw`` with the copy.
- ``buffered``: the same order from decoded runs: each thread keeps ``--open`` GOP runs open, each decoded whole
  in one call when it opens (one decoder per clip), and takes one frame of a run drawn at random at a time, so the
  frames wait in memory until drawn; ``buffered+chw`` with the copy (from memory the decode left long ago).

The last two are a bound no loader built on torchcodec's CPU decoder can beat: decode in the order a shuffling
loader must use, and the one copy its output layout needs, with no workers, no stage and no Python beyond the calls.

    python benchmarks/decode_access_patterns.py data/aloha-rr --threads 2 --repeats 3

Not a test: CPU time, for the docs' account of where the loader's time goes (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import threading
import time
from typing import Any

PATTERNS = ("sequential", "runs", "interleaved", "interleaved+hwc", "interleaved+chw", "lanes", "lanes+chw",
            "lanecalls", "lanecalls+chw", "buffered", "buffered+chw")
_BATCH = 16  # slots of the batch array the copies rotate through


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _plan(num_frames: int, gop: int, *, shuffle: bool, seed: int) -> list[list[int]]:
    runs = [list(range(s, min(num_frames, s + gop))) for s in range(0, num_frames, gop)]
    if shuffle:
        random.Random(seed).shuffle(runs)
    return runs


def _decode_share(clips: list[bytes], pattern: str, *, gop: int, call_frames: int, seed: int,
                  open_decoders: int = 48) -> int:
    """Decode every frame of ``clips`` in ``pattern``; returns the frames decoded."""
    import numpy as np
    from torchcodec.decoders import VideoDecoder

    from roboreel.reader.decode._pixels import copy_frame

    decoders = [VideoDecoder(c, seek_mode="approximate") for c in clips]
    layout = pattern.partition("+")[2]
    batch = None
    if layout and decoders:
        h, w = decoders[0].metadata.height or 0, decoders[0].metadata.width or 0
        batch = np.empty((_BATCH, 3, h, w) if layout == "chw" else (_BATCH, h, w, 3), dtype=np.uint8)
    plans = [_plan(d.metadata.num_frames or 0, gop, shuffle=pattern != "sequential", seed=seed + i)
             for i, d in enumerate(decoders)]
    if pattern.startswith("buffered"):
        return _buffered(decoders, plans, batch, open_runs=open_decoders, seed=seed, call_frames=call_frames)
    order: list[tuple[int, list[int]]] = []
    if pattern.startswith("lane"):  # groups of ``open_decoders``, one frame (or call) of each in turn
        step = 1 if pattern.startswith("lanes") else call_frames
        for g in range(0, len(plans), open_decoders):
            group = range(g, min(len(plans), g + open_decoders))
            for f in range(0, max((decoders[i].metadata.num_frames or 0 for i in group), default=0), step):
                order += [(i, list(range(f, min(f + step, decoders[i].metadata.num_frames or 0)))) for i in group
                          if f < (decoders[i].metadata.num_frames or 0)]
    elif pattern.startswith("interleaved"):
        for k in range(max(map(len, plans), default=0)):
            order += [(i, p[k]) for i, p in enumerate(plans) if k < len(p)]
    else:
        order = [(i, run) for i, p in enumerate(plans) for run in p]
    n = 0
    for i, run in order:
        for j in range(0, len(run), call_frames):
            data = decoders[i].get_frames_at(run[j:j + call_frames]).data
            if batch is not None:
                for frame in data:
                    a = frame.numpy()  # [C, H, W] view of channels-last memory
                    copy_frame(a if layout == "chw" else a.transpose(1, 2, 0), batch[n % _BATCH])
                    n += 1
            else:
                n += len(data)
    return n


def _buffered(decoders: list, plans: list[list[list[int]]], batch: Any, *, open_runs: int, seed: int,
              call_frames: int) -> int:
    """``buffered``: whole runs decoded as they open (calls of ``call_frames``), their frames drawn one at a time
    at random."""
    from roboreel.reader.decode._pixels import copy_frame

    rng = random.Random(seed)
    todo = [(i, run) for i, p in enumerate(plans) for run in p]
    rng.shuffle(todo)
    live: list[list[Any]] = []
    n = 0
    while todo or live:
        while todo and len(live) < open_runs:
            i, run = todo.pop()
            live.append([f for j in range(0, len(run), call_frames)
                         for f in decoders[i].get_frames_at(run[j:j + call_frames]).data])
        k = rng.randrange(len(live))
        frame = live[k].pop()
        if batch is not None:
            copy_frame(frame.numpy(), batch[n % _BATCH])
        n += 1
        if not live[k]:
            live[k] = live[-1]
            live.pop()
    return n


def measure(clips: list[bytes], pattern: str, *, threads: int, gop: int, call_frames: int,
            seed: int = 0, open_decoders: int = 48) -> tuple[float, float]:
    """(CPU ms per frame, frames/s) decoding ``clips`` in ``threads`` threads of this process."""
    counts: list[int] = []
    lock = threading.Lock()

    def run(share: list[bytes]) -> None:
        n = _decode_share(share, pattern, gop=gop, call_frames=call_frames, seed=seed, open_decoders=open_decoders)
        with lock:
            counts.append(n)

    workers = [threading.Thread(target=run, args=(clips[t::threads],)) for t in range(threads)]
    c0, t0 = _cpu(), time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    frames = sum(counts)
    return (_cpu() - c0) / frames * 1e3, frames / (time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("compiled", help="a local compiled dataset")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="alternated rounds; medians reported")
    p.add_argument("--copies", type=int, default=2, help="decode the clip set this many times per round")
    p.add_argument("--open", type=int, default=48, help="decoders (``lanes``) or runs (``buffered``) one thread keeps going at once")
    args = p.parse_args()
    import torch

    from roboreel.bench.ceiling import compiled_clips
    from roboreel.formats.manifest import load_manifest
    from roboreel.reader.decode._heap import (
        DECODE_CALL_BYTES,
        DECODE_MMAP_THRESHOLD_BYTES,
        DECODE_TRIM_THRESHOLD_BYTES,
        pin_mmap_threshold,
    )

    torch.set_num_threads(1)
    pin_mmap_threshold(DECODE_MMAP_THRESHOLD_BYTES, DECODE_TRIM_THRESHOLD_BYTES)  # the decode stage's heap
    manifest = load_manifest(args.compiled)
    cam = manifest.cameras[0]
    gop = cam.gop or 10
    call_frames = max(1, DECODE_CALL_BYTES // (3 * cam.width * cam.height))
    clips = compiled_clips(args.compiled) * args.copies
    print(f"{len(clips)} clips of {cam.width}x{cam.height}, GOP {gop}, calls of <= {call_frames} frames, "
          f"{args.threads} threads")
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in PATTERNS}
    for r in range(args.repeats):
        for pattern in PATTERNS:
            results[pattern].append(measure(clips, pattern, threads=args.threads, gop=gop,
                                               call_frames=call_frames, seed=r, open_decoders=args.open))
    base = statistics.median(ms for ms, _ in results["sequential"])
    for pattern in PATTERNS:
        ms = statistics.median(m for m, _ in results[pattern])
        fps = statistics.median(f for _, f in results[pattern])
        spread = ", ".join(f"{m:.3f}" for m, _ in results[pattern])
        print(f"{pattern:16s} {ms:.4f} CPU ms/frame ({100 * (ms / base - 1):+.1f}%), {fps:,.0f} frames/s  [{spread}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
