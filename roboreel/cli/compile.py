"""``roboreel compile SRC OUT``: compile a LeRobot v3 dataset into HEVC episode shards (see docs/format.md).

``roboreel compile SRC OUT --part K/N`` compiles the K-th of N blocks of shards (0 <= K < N, e.g. a SLURM array
task id); ``roboreel compile --finalize OUT`` writes the manifest once every part is done (the last part to
finish also does it by itself).
"""

from __future__ import annotations

import argparse
import os


def _size(text: str) -> tuple[str | None, int, int]:
    """``HxW`` (every camera) or ``KEY=HxW`` (one camera) -> (KEY or None, H, W)."""
    key, _, hw = text.rpartition("=")
    try:
        h, w = (int(x) for x in hw.lower().split("x"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"--resize must be HxW or CAMERA=HxW (e.g. 224x224, observation.images.top=240x320), got {text!r}"
        ) from e
    return key or None, h, w


def resize_settings(sizes: list[tuple[str | None, int, int]] | None) -> dict:
    """The ``resize`` / ``resize_cameras`` settings of repeated ``--resize`` options (one HxW for all at most)."""
    sizes = sizes or []
    every = [(h, w) for key, h, w in sizes if key is None]
    if len(every) > 1:
        raise ValueError(f"--resize HxW (every camera) given {len(every)} times: {every}")
    return {"resize": every[0] if every else None,
            "resize_cameras": tuple((key, h, w) for key, h, w in sizes if key is not None)}


def register(sub: argparse._SubParsersAction) -> None:
    from roboreel.compile.settings import IMAGE_MODES, X265_PRESETS, CompileSettings
    from roboreel.formats.transient import DEFAULT_BACKOFF_S, DEFAULT_RETRIES

    d = CompileSettings()
    p = sub.add_parser("compile", help="compile a LeRobot v3 dataset into HEVC episode tar shards",
                       description=__doc__, usage="roboreel compile SRC OUT [options]\n"
                                                  "       roboreel compile --finalize OUT")
    p.add_argument("src", nargs="?", metavar="SRC",
                   help="source dataset: path or fsspec URL (hf://datasets/..., s3://, file://)")
    p.add_argument("out", nargs="?", metavar="OUT",
                   help="output directory; one holding a compile of an earlier state of SRC with the same settings "
                        "is updated: unchanged episodes reused, new and changed ones compiled (docs/incremental.md)")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                   help="parallel encodes, one (episode, camera) clip each (default: the CPUs this process may "
                        "use, %(default)s here)")
    p.add_argument("--part", default=None, metavar="K/N",
                   help="compile only block K of N of the shards (0 <= K < N, e.g. a SLURM array task id; default: "
                        "all)")
    p.add_argument("--finalize", metavar="OUT", default=None,
                   help="only write meta/ + roboreel.json of OUT, once every part is done (default: the last part "
                        "to finish does it)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (episodes compiled and reused, clips, PSNR, bytes, seconds) instead "
                        "of the summary (default: the summary)")
    p.add_argument("--crf", type=int, default=d.crf, help=f"x265 CRF (default {d.crf})")
    p.add_argument("--preset", default=d.preset, choices=X265_PRESETS, help=f"x265 preset (default {d.preset})")
    p.add_argument("--gop", type=int, default=d.gop, help=f"keyframe interval in frames (default {d.gop})")
    p.add_argument("--bframes", type=int, default=d.bframes, help=f"B-frames (default {d.bframes})")
    p.add_argument("--codec", default=d.codec, choices=["hevc"], help=f"output codec (default {d.codec})")
    p.add_argument("--reencode", action="store_true",
                   help="re-encode HEVC/H.264 sources instead of copying (default: copy where it is exact)")
    p.add_argument("--resize", type=_size, action="append", default=None, metavar="[CAMERA=]HxW",
                   help="resize every camera to HxW, or CAMERA to HxW (repeatable; a camera's own size wins); "
                        "antialiased like torchvision's resize(antialias=True), depth maps nearest neighbour "
                        "(docs/format.md, Resize and frame rate; default: the source's size)")
    p.add_argument("--fps", type=int, default=None, metavar="N",
                   help="output frame rate N, dividing the source's: each episode keeps frames 0, k, 2k, ... "
                        "(k = source fps / N); rows, indices, timestamps and stats follow (default: the source's)")
    p.add_argument("--shard-size-mb", type=float, default=d.shard_size_mb,
                   help=f"upper bound on a shard's size (default {d.shard_size_mb:g} MB); the shard count is "
                        "then rounded up to a multiple of 24 (or 8, 4, 2) so readers split shards evenly")
    p.add_argument("--episodes-per-shard", type=int, default=None,
                   help="fixed episodes per shard (overrides the size-based plan; default: size-based)")
    p.add_argument("--loop-filters", action="store_true",
                   help="keep HEVC's in-loop filters (deblocking, SAO): a little more PSNR for more CPU decode per frame, "
                        "every epoch (default off; the trade measured: docs/benchmarks.md)")
    p.add_argument("--psnr-frames", type=int, default=d.psnr_frames,
                   help=f"frames per clip sampled for the PSNR report (default {d.psnr_frames})")
    p.add_argument("--min-psnr", type=float, default=d.min_psnr,
                   help=f"fidelity floor (dB) of every re-encoded frame, in RGB against the source decode: lower CRFs "
                        f"are tried, then x265 lossless (default {d.min_psnr:g}; 0 turns it off)")
    p.add_argument("--images", choices=IMAGE_MODES, default=d.images,
                   help="image features (images in the data parquet): 'clips' (default) makes RGB ones HEVC clips "
                        "held to --min-psnr on every frame in RGB (faster to read than the kept images: "
                        "docs/benchmarks.md); 'keep' carries the encoded images as they are, exact (docs/format.md, "
                        "Image features)")
    p.add_argument("--remux-max-gop", type=int, default=d.remux_max_gop,
                   help=f"stream-copy a source only if no keyframe interval is longer (frames; default "
                        f"{d.remux_max_gop})")
    p.add_argument("--retries", type=int, default=DEFAULT_RETRIES,
                   help="retries of a remote source read after a transient fault (timeout, connection reset, HTTP "
                        "5xx/429/408, truncated body); then the compile stops naming the file, keeps what it "
                        f"finished, and rerunning resumes (default {DEFAULT_RETRIES})")
    p.add_argument("--backoff-s", type=float, default=DEFAULT_BACKOFF_S,
                   help="wait before the first retry, doubled for each further one, at most 10 s "
                        f"(default {DEFAULT_BACKOFF_S})")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a compile of another source or other settings in OUT (default: refuse)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar on stderr)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.compile import CompileSettings, compile_dataset, finalize
    from roboreel.compile.plan import parse_part
    from roboreel.formats.transient import Retry

    if args.finalize is not None:
        if args.src is not None or args.out is not None:
            raise ValueError("--finalize takes only OUT: roboreel compile --finalize OUT")
        m = finalize(args.finalize)
        print(f"finalized {args.finalize}: {len(m.episodes)} episodes, {m.total_frames} frames, "
              f"{len(m.shards)} shards, {sum(s.size for s in m.shards) / 1e6:.1f} MB")
        return 0
    if args.src is None or args.out is None:
        raise ValueError("compile needs SRC and OUT: roboreel compile SRC OUT")
    src, out = args.src, args.out
    settings = CompileSettings(
        codec=args.codec, crf=args.crf, preset=args.preset, gop=args.gop, bframes=args.bframes,
        reencode=args.reencode, **resize_settings(args.resize), fps=args.fps, shard_size_mb=args.shard_size_mb,
        episodes_per_shard=args.episodes_per_shard, psnr_frames=args.psnr_frames, loop_filters=args.loop_filters,
        min_psnr=args.min_psnr, remux_max_gop=args.remux_max_gop, images=args.images,
    )
    report = compile_dataset(
        src, out, settings=settings, workers=args.workers,
        part=parse_part(args.part) if args.part else None, progress=not (args.no_progress or args.json),
        overwrite=args.overwrite, retry=Retry(args.retries, args.backoff_s),
    )
    print(report.to_json() if args.json else report.summary(), end="" if args.json else "\n")
    return 0
