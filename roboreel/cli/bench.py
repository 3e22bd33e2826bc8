"""``roboreel bench``: dataloading benchmark (compiled vs source baselines) and compile throughput."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark dataloading (single/sarm) against the source baseline; compile speed")
    p.add_argument("compiled", nargs="?", help="compiled dataset (default: PREPARE/compiled)")
    p.add_argument("--source", help="its source dataset (default: the manifest's source url)")
    p.add_argument("--prepare", metavar="DIR", help="synthesise + compile the standard benchmark dataset into DIR "
                   "(3 cameras, 20 fps, 224x224, --episodes) unless already there, and use it")
    p.add_argument("--episodes", type=int, default=40, help="with --prepare")
    p.add_argument("--height", type=int, default=224, help="with --prepare")
    p.add_argument("--width", type=int, default=224, help="with --prepare")
    p.add_argument("--min-length", type=int, default=150, help="with --prepare")
    p.add_argument("--max-length", type=int, default=250, help="with --prepare")
    p.add_argument("--modes", default="single,sarm")
    p.add_argument("--readers", default="compiled,reference,lerobot")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--pool-size", type=int, default=None, help="CompiledDataset episode_pool_size")
    p.add_argument("--decode-device", default="cpu")
    p.add_argument("--uint8", action="store_true", help="camera frames as uint8 for every reader (normalise on the GPU)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up batches excluded from the steady window")
    p.add_argument("--batches", type=int, default=40, help="batches in the steady window")
    p.add_argument("--seconds", type=float, default=None, help="steady window length instead of --batches")
    p.add_argument("--repeats", type=int, default=3, help="A B A B ... alternations per mode")
    p.add_argument("--remote-latency-ms", type=float, default=None,
                   help="also run over HTTP from 127.0.0.1 with this fixed latency per request")
    p.add_argument("--no-ceiling", action="store_true", help="skip the decode-ceiling measurement")
    p.add_argument("--compile", action="store_true", help="run the compile benchmark (roboreel vs ffmpeg CLI)")
    p.add_argument("--compile-workers", default="1,2")
    p.add_argument("--no-dataloading", action="store_true", help="only the compile benchmark")
    p.add_argument("--soak", type=int, default=None, metavar="EPOCHS",
                   help="soak: EPOCHS epochs with persistent workers, RSS of every process per epoch")
    p.add_argument("--soak-warmup", type=int, default=5, help="with --soak: epochs before growth is measured")
    p.add_argument("--out", default="bench-out", help="directory for JSON/CSV/PNG reports")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from roboreel.bench.runner import RunConfig
    from roboreel.bench.suite import DataSpec, prepare, run_suite
    from roboreel.formats.manifest import load_manifest

    out = Path(args.out)
    if args.prepare:
        spec = DataSpec(episodes=args.episodes, height=args.height, width=args.width, min_length=args.min_length,
                        max_length=args.max_length)
        src, comp = prepare(Path(args.prepare), spec)
        compiled, source = str(comp), str(src)
        compiled = args.compiled or compiled
    elif args.compiled:
        compiled = args.compiled
        source = args.source or load_manifest(compiled).source.get("url")
        if not source:
            raise ValueError("no --source given and the manifest names no source url")
    elif args.no_dataloading and args.source:
        compiled, source = "", args.source  # the compile benchmark needs only the source
    else:
        raise ValueError("give a compiled dataset path or --prepare DIR (or --source with --no-dataloading)")
    if args.soak is not None:
        from roboreel.bench.soak import SoakConfig, soak

        doc = soak(compiled, SoakConfig(epochs=args.soak, warmup=args.soak_warmup, batch_size=args.batch_size,
                                        num_workers=args.num_workers), out)
        print("\n| process | RSS after warm-up (MB) | RSS at the end (MB) | growth | slope (MB/epoch) |\n"
              "|---|---|---|---|---|")
        for k, g in doc["growth"].items():
            print(f"| {k} | {g['after_warmup_mb']:.0f} | {g['end_mb']:.0f} | {g['growth_pct']:+.2f}% "
                  f"| {g['slope_mb_per_epoch']:+.3f} |")
        print(f"wrote {out}/soak.json and {out}/soak.csv")
        return 0
    if not args.no_dataloading:
        cfg = RunConfig(batch_size=args.batch_size, num_workers=args.num_workers, prefetch=args.prefetch,
                        pool_size=args.pool_size, decode_device=args.decode_device, warmup_batches=args.warmup,
                        batches=args.batches, seconds=args.seconds, uint8=args.uint8)
        run_suite(compiled=compiled, source=source, readers=args.readers.split(","), modes=args.modes.split(","),
                  cfg=cfg, repeats=args.repeats, out=out, remote_latency_ms=args.remote_latency_ms,
                  ceiling=not args.no_ceiling)
    if args.compile:
        from roboreel.bench.compile_bench import compile_benchmark, compile_ratios
        from roboreel.compile import CompileSettings

        workers = tuple(int(w) for w in args.compile_workers.split(","))
        runs = compile_benchmark(source, settings=CompileSettings(), workers=workers)
        ratios = compile_ratios(runs)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compile.json").write_text(json.dumps({"runs": runs, "ratios": ratios}, indent=1))
        print("\n| workers | roboreel frames/s | ffmpeg CLI frames/s | ratio |\n|---|---|---|---|")
        for r in ratios:
            print(f"| {r['workers']} | {r['roboreel_fps']:.0f} | {r['ffmpeg_fps']:.0f} | {r['ratio']:.2f} |")
        print(f"wrote {out}/compile.json")
    return 0
