"""``roboreel bench read``: samples/s of the compiled readers against LeRobotDataset and the reference reader."""

from __future__ import annotations

import argparse

from roboreel.cli import _args
from roboreel.cli.bench import options

DESCRIPTION = """Dataloading benchmark: the readers (--readers) read the same compiled dataset (or its source), in
each sample shape (--modes), alternated A B A B; each run in a fresh process of its own. Reports samples/s, first
batch, latency percentiles, peak RSS and CPU per sample, and the decode ceiling, to --out (runs.json/csv, summary,
chart)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("read", help="dataloading: compiled readers vs LeRobotDataset (samples/s, latency, memory)",
                       description=DESCRIPTION)
    p.add_argument("compiled", nargs="?", default=None, metavar="COMPILED",
                   help="compiled dataset, or a mixture a,b,... (compare it with its largest member: --readers "
                        "loader,largest_loader) (default: PREPARE/compiled)")
    p.add_argument("--source", default=None, metavar="SRC",
                   help="its source dataset, read by the reference and lerobot readers (default: the manifest's "
                        "source url)")
    p.add_argument("--weights", default=None, type=_args.weights, metavar="W1,W2,...",
                   help="a mixture's draw probabilities, one per dataset (default: every frame of each once)")
    # The names and meanings below are roboreel/bench/readers.py's READERS and MODES (tests/test_cli_help.py).
    p.add_argument("--modes", default="single,sarm",
                   help="sample shapes to read, comma-separated, of: single = one frame per camera and the sample's "
                        "own row (no delta_timestamps); sarm = one frame per camera and an action window of 8 steps "
                        "1 s apart (delta_timestamps for action)")
    p.add_argument("--readers", default="compiled,loader,reference,lerobot",
                   help="readers to compare, comma-separated, of: compiled = DataLoader(CompiledDataset); loader = "
                        "roboreel.loader (decode threads in the main process); loader_cl = loader with "
                        "channels_last=True; loader_inproc = loader with num_workers=0 (no worker processes); "
                        "loader_readme = roboreel.loader called exactly as the README's training loop calls it "
                        "(batch_size and num_workers only); loader_refork = loader_readme with "
                        "persistent_workers=False; loader_random = loader_readme with frame_order=\"random\" "
                        "(frames one by one at random, not in GOP runs); loader_segments = loader_readme with "
                        "frame_order=\"segments\" (one GOP run per episode at a time: fastest, "
                        "neighbouring frames in a batch); loader_unmixed = loader_readme with mix_workers=False "
                        "(each batch from one worker, as DataLoader batches); largest = compiled over a mixture's largest member alone; "
                        "largest_loader = loader over that member; reference = roboreel's map-style reader over the "
                        "source; lerobot = LeRobotDataset over the source")
    p.add_argument("--remap", default=None, metavar="FILE",
                   help="a mixture's canonical keys when its members differ: JSON/YAML, one {old: new or null} per "
                        "dataset, as roboreel inspect --remap reads it (docs/mixtures.md) (default: none)")
    p.add_argument("--pad", default=None, choices=["max"],
                   help="zero-pad a mixture's 1-D features to the largest member's size (default: none)")
    options.lerobot_python_option(p)
    p.add_argument("--no-isolate", action="store_true",
                   help="run every reader in this process (default: each run in a fresh process of its own, so peak "
                        "RSS and CPU time are that reader's alone)")
    p.add_argument("--remote-latency-ms", type=float, metavar="MS", default=None,
                   help="also read over HTTP from 127.0.0.1 with this fixed latency per request (default: none, "
                        "local only)")
    p.add_argument("--s3", action="store_true",
                   help="also read the compiled dataset from a real S3 API on 127.0.0.1 (moto's server, read through "
                        "s3fs with the AWS variables set for the run; needs moto[server] and s3fs); the source "
                        "readers stay local (default: local only)")
    p.add_argument("--no-ceiling", action="store_true", help="skip the decode-ceiling measurement")
    p.add_argument("--ceiling-seconds", type=float, default=None, metavar="S",
                   help="least length of each ceiling measurement, taken before every run and after a round's last "
                        "(default 2: shorter ones catch a shared host's bursts)")
    options.loader_options(p, full=True)
    options.return_uint8_option(p)
    options.window_options(p)
    p.add_argument("--one-epoch", action="store_true",
                   help="end the steady window at its epoch's end (default: run on into the next epochs, set_epoch "
                        "each, until --batches/--seconds: on a set smaller than the window that is what training "
                        "sees, epoch starts included)")
    options.dataset_options(p, prepare=True)
    options.out_option(p)
    p.set_defaults(func=run)


def resolve(args: argparse.Namespace) -> tuple[str, str]:
    """(compiled, source) to read: COMPILED (its source from --source or its manifest), or the --prepare'd set."""
    from pathlib import Path

    from roboreel.bench.suite import DataSpec, prepare
    from roboreel.formats.manifest import load_manifest

    if args.prepare:
        spec = DataSpec(episodes=args.episodes, height=args.height, width=args.width, min_length=args.min_length,
                        max_length=args.max_length, cameras=args.cameras, fps=args.fps)
        src, comp = prepare(Path(args.prepare), spec)
        return args.compiled or str(comp), args.source or str(src)
    if not args.compiled:
        raise ValueError("give a compiled dataset COMPILED or --prepare DIR")
    if "," in args.compiled:  # a mixture: only the compiled readers read it
        return args.compiled, args.source or ""
    source = args.source or load_manifest(args.compiled).source.get("url")
    if not source:
        raise ValueError(f"{args.compiled}: no --source given and its manifest names no source url")
    return args.compiled, source


def run(args: argparse.Namespace) -> int:
    from roboreel.bench.suite import SuiteOptions, run_suite

    compiled, source = resolve(args)
    cfg = options.run_config(args, span_epochs=not args.one_epoch, weights=args.weights, remap_file=args.remap,
                             pad=args.pad)
    suite = SuiteOptions(readers=tuple(args.readers.split(",")), modes=tuple(args.modes.split(",")),
                         repeats=args.repeats, remote_latency_ms=args.remote_latency_ms, s3=args.s3,
                         ceiling=not args.no_ceiling, ceiling_seconds=args.ceiling_seconds,
                         lerobot_python=args.lerobot_python, isolate=not args.no_isolate)
    run_suite(compiled=compiled, source=source, cfg=cfg, suite=suite, out=args.out)
    return 0
