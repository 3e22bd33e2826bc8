"""The PSNR floor's costs, measured: what it adds to a compile, and what reading depth costs.

1. Compile a synthetic source (RGB + a LeRobot-style depth camera), or ``--source SRC`` (this part only), with the
   floor off (``min_psnr=0``: 4 sampled frames per clip) and on (default 40 dB: every frame checked in RGB as
   x265 emits it, lower CRFs where a frame needs it), alternated ``--rounds`` times: wall seconds, the lowest
   PSNR each saw, output MB and the re-encode reasons.
2. Read the compiled dataset (``CompiledDataset``, one process, shuffled) and, when LeRobot is importable (run
   in its venv with ``PYTHONPATH`` at this checkout), the source with ``LeRobotDataset`` in a shuffled order,
   alternated: samples/s, depth camera included.

3. ``--gop``: the stream-copy GOP policy. H.264 sources written with keyframes every G frames (one per G in
   ``--gops``) are compiled as stream copies (``remux_max_gop`` raised) and, for the longest G, re-encoded by the
   default policy; each compile is read through ``roboreel.loader`` (uint8, shuffled), alternated ``--rounds``
   times: samples/s.

    python benchmarks/psnr_floor_cost.py --height 240 --width 320 --episodes 4 --length 80
    python benchmarks/psnr_floor_cost.py --gop --height 160 --width 160 --length 240
    python benchmarks/psnr_floor_cost.py --source data/aloha --rounds 3 --workers 2
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from roboreel.compile import CompileSettings, compile_dataset
from roboreel.reader import CompiledDataset
from roboreel.synth import SynthConfig, synthesize

RGB, DEPTH = "observation.images.top", "observation.images.depth"


def _read_compiled(out: Path, n: int) -> float:
    ds = CompiledDataset(str(out), seed=1)
    t0 = time.perf_counter()
    got = 0
    for _ in ds:
        got += 1
        if got >= n:
            break
    return got / (time.perf_counter() - t0)


def _read_lerobot(src: Path, n: int) -> float | None:
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError:
        return None
    ds = LeRobotDataset("local/bench", root=src)
    order = list(range(len(ds)))
    random.Random(1).shuffle(order)
    t0 = time.perf_counter()
    for i in order[:n]:
        ds[i]
    return min(n, len(order)) / (time.perf_counter() - t0)


def _loader_rate(out: Path, batches: int) -> float:
    import roboreel

    ds = CompiledDataset(str(out), seed=1, return_uint8=True)
    n, t0 = 0, time.perf_counter()
    for i, b in enumerate(roboreel.loader(ds, batch_size=16, decode_threads=2)):
        n += len(b["index"])
        if i + 1 >= batches:
            break
    return n / (time.perf_counter() - t0)


def gop_policy(args: argparse.Namespace, work: Path) -> None:
    outs: dict[str, Path] = {}
    gops = [int(g) for g in args.gops.split(",")]
    for g in gops:
        src = work / f"src-g{g}"
        synthesize(src, SynthConfig(episodes=args.episodes, min_length=args.length, max_length=args.length, fps=30,
                                    cameras=(RGB,), height=args.height, width=args.width, codec="libx264", g=g,
                                    crf=18))
        out = outs[f"copy, GOP {g}"] = work / f"copy-g{g}"
        rep = compile_dataset(str(src), str(out), workers=1,
                              settings=CompileSettings(remux_max_gop=1 << 20, episodes_per_shard=2))
        assert rep.clips_remuxed == args.episodes, rep.summary()
        if g == max(gops):
            out = outs[f"default policy (re-encoded, GOP 10), source GOP {g}"] = work / f"enc-g{g}"
            rep = compile_dataset(str(src), str(out), workers=1, settings=CompileSettings(episodes_per_shard=2))
            assert rep.clips_encoded == args.episodes, rep.summary()
    print(f"sources: H.264 (x264 crf 18), {args.episodes} x {args.length} frames, {args.height}x{args.width}, "
          "1 camera, synthetic scene")
    for r in range(args.rounds):
        for name, out in outs.items():
            print(f"round {r}: {name}: roboreel.loader {_loader_rate(out, args.batches):.0f} samples/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--length", type=int, default=80)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--samples", type=int, default=200, help="samples read per reader and round")
    p.add_argument("--gop", action="store_true", help="measure the stream-copy GOP policy instead (see above)")
    p.add_argument("--gops", default="2,32,240", help="source GOPs for --gop")
    p.add_argument("--batches", type=int, default=40, help="loader batches (of 16) per compile and round, --gop")
    p.add_argument("--source", default=None, help="part 1 only, on this dataset instead of the synthetic one")
    p.add_argument("--workers", type=int, default=1, help="compile workers, part 1")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench27-"))
    try:
        if args.gop:
            gop_policy(args, work)
            return
        src = Path(args.source) if args.source else work / "src"
        if args.source:
            print(f"source: {src}")
        else:
            synthesize(src, SynthConfig(episodes=args.episodes, min_length=args.length, max_length=args.length,
                                        fps=30, cameras=(RGB,), depth_cameras=(DEPTH,), height=args.height,
                                        width=args.width))
            print(f"source: {args.episodes} x {args.length} frames, {args.height}x{args.width}, 1 RGB (AV1, "
                  "synthetic scene) + 1 depth camera (lossless HEVC gray12le)")
        out = None
        for r in range(args.rounds):
            for floor in (0.0, 40.0):
                out = work / f"out-{r}-{int(floor)}"
                settings = CompileSettings(min_psnr=floor, episodes_per_shard=2)
                t0 = time.perf_counter()
                rep = compile_dataset(str(src), str(out), settings=settings, workers=args.workers, progress=False)
                print(f"compile round {r} min_psnr={floor:g}: {time.perf_counter() - t0:.2f} s, PSNR min "
                      f"{rep.psnr_min:.2f} dB, mean {rep.psnr_mean:.2f} dB, {rep.bytes / 1e6:.2f} MB, "
                      f"{rep.clips_lossless} lossless clips; {dict(rep.reencode_reasons)}")
        if args.source:
            return
        for r in range(args.rounds):
            mine = _read_compiled(out, args.samples)
            theirs = _read_lerobot(src, args.samples)
            print(f"read round {r}: CompiledDataset {mine:.1f} samples/s"
                  + (f", LeRobotDataset {theirs:.1f} samples/s" if theirs is not None else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
