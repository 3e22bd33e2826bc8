"""``roboreel bench compile``: compile throughput and fidelity, roboreel against the ffmpeg CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from roboreel.cli.bench import options

DESCRIPTION = """Compile benchmark: roboreel and the ffmpeg CLI transcode the same frames to HEVC with the same
x265 settings, alternated per worker count; reports throughput (frames/s, CPU seconds) and PSNR against the source
decode, to --out/compile.json. Reads --source, or without one a synthetic LeRobot v3 dataset (AV1, LeRobot's
defaults) of the shape below, made once under --out and reused."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile throughput and PSNR: roboreel vs the ffmpeg CLI",
                       description=DESCRIPTION)
    p.add_argument("--source", default=None, metavar="SRC",
                   help="LeRobot v3 dataset to transcode (default: none, a synthetic one of the shape below)")
    p.add_argument("--workers", default="1,2", metavar="W1,W2,...", help="worker counts to compare")
    p.add_argument("--repeats", type=int, metavar="N", default=2, help="alternations per worker count")
    p.add_argument("--unit", choices=["clip", "file"], default="clip",
                   help="ffmpeg CLI: one process per episode x camera (the clips roboreel makes) or per source mp4")
    p.add_argument("--min-psnr", type=float, metavar="DB", default=0.0,
                   help="roboreel's fidelity floor (compile --min-psnr): 0 turns it off so both sides do the same "
                        "transcode; 40, compile's default, measures what the floor costs against ffmpeg's plain one")
    p.add_argument("--psnr-stride", type=int, metavar="N", default=1,
                   help="PSNR of every k-th frame vs the source decode (0: none)")
    options.dataset_options(p, prepare=False)
    options.out_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.bench.compile_bench import CompileBenchConfig, compile_benchmark, markdown
    from roboreel.compile import CompileSettings

    source = args.source or str(synthetic_source(args, args.out))
    cfg = CompileBenchConfig(workers=tuple(int(w) for w in args.workers.split(",")), repeats=args.repeats,
                             unit=args.unit, psnr_stride=args.psnr_stride)
    result = compile_benchmark(source, settings=CompileSettings(min_psnr=args.min_psnr), config=cfg)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile.json").write_text(json.dumps({"source": source, **result}, indent=1))
    print(f"\ncompile benchmark on {source} ({result['ffmpeg_version']}, ffmpeg unit: {cfg.unit}, roboreel "
          f"--min-psnr {args.min_psnr:g})")
    print(markdown(result))
    print(f"wrote {args.out}/compile.json")
    return 0


def synthetic_source(args: argparse.Namespace, out: Path) -> Path:
    """A synthetic LeRobot v3 dataset (AV1, LeRobot's defaults) for the compile benchmark, made once per shape."""
    from roboreel.synth import SynthConfig, camera_names, synthesize

    root = out / (f"compile-source-{args.height}x{args.width}-{args.episodes}ep-{args.cameras}cam-"
                  f"{args.fps}fps-{args.min_length}-{args.max_length}")
    if not (root / "meta" / "info.json").exists():
        cfg = SynthConfig(episodes=args.episodes, cameras=camera_names(args.cameras), height=args.height,
                          width=args.width, fps=args.fps, min_length=args.min_length, max_length=args.max_length,
                          video_files_size_in_mb=100.0, data_files_size_in_mb=100.0)
        synthesize(root, cfg, overwrite=True, progress=True)
    return root
