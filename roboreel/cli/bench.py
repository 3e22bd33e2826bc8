"""``roboreel bench``: dataloading benchmark (compiled vs source baselines) and compile throughput."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark dataloading (single/sarm) against the source baseline; compile speed")
    p.add_argument("compiled", nargs="?", help="compiled dataset (default: PREPARE/compiled), or a mixture a,b,... "
                   "(compare it with its largest member: --readers loader,largest_loader)")
    p.add_argument("--weights", default=None, metavar="W1,W2,...",
                   help="a mixture's draw probabilities, one per dataset (default: every frame of each once)")
    p.add_argument("--source", help="its source dataset (default: the manifest's source url)")
    p.add_argument("--prepare", metavar="DIR", help="synthesise + compile the standard benchmark dataset into DIR "
                   "(3 cameras, 20 fps, 224x224, --episodes) unless already there, and use it")
    p.add_argument("--episodes", type=int, default=40, help="with --prepare")
    p.add_argument("--height", type=int, default=224, help="with --prepare")
    p.add_argument("--width", type=int, default=224, help="with --prepare")
    p.add_argument("--cameras", type=int, default=3, help="with --prepare or a synthetic --compile dataset")
    p.add_argument("--fps", type=int, default=20, help="with --prepare")
    p.add_argument("--min-length", type=int, default=150, help="with --prepare")
    p.add_argument("--max-length", type=int, default=250, help="with --prepare")
    p.add_argument("--modes", default="single,sarm")
    p.add_argument("--readers", default="compiled,loader,reference,lerobot",
                   help="compiled = DataLoader(CompiledDataset), loader = roboreel.loader (decode threads in the main "
                        "process), loader_cl = the same with channels_last=True, largest / largest_loader = compiled "
                        "/ loader over a mixture's largest member alone, reference, lerobot = LeRobotDataset")
    p.add_argument("--decode-threads", type=int, default=None,
                   help="the loader reader's decode threads (default: the available cores)")
    p.add_argument("--lerobot-python", default=None, metavar="PYTHON",
                   help="run the lerobot reader in this interpreter (LeRobot's own venv, e.g. "
                        "/work/venvs/lerobot/bin/python)")
    p.add_argument("--no-isolate", action="store_true",
                   help="run every reader in this process (default: each run in a fresh process of its own, so peak "
                        "RSS and CPU time are that reader's alone)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--pool-size", type=int, default=None, help="CompiledDataset episode_pool_size")
    p.add_argument("--decode-device", default="cpu")
    p.add_argument("--uint8", action="store_true", help="camera frames as uint8 for every reader (normalise on the GPU)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up batches excluded from the steady window")
    p.add_argument("--no-persistent-workers", action="store_true",
                   help="new DataLoader workers every epoch (default: persistent, as lerobot-train runs them)")
    p.add_argument("--one-epoch", action="store_true",
                   help="end the steady window at its epoch's end (default: run on into the next epochs, set_epoch "
                        "each, until --batches/--seconds: on a set smaller than the window that is what training "
                        "sees, epoch starts included)")
    p.add_argument("--warmup-epochs", type=int, default=0,
                   help="whole epochs each run reads untimed first; the steady window is then in the next epoch "
                        "(the steady state of a long training run; first batch and peak RSS still count them)")
    p.add_argument("--batches", type=int, default=40, help="batches in the steady window")
    p.add_argument("--seconds", type=float, default=None, help="steady window length instead of --batches")
    p.add_argument("--repeats", type=int, default=3, help="A B A B ... alternations per mode")
    p.add_argument("--remote-latency-ms", type=float, default=None,
                   help="also run over HTTP from 127.0.0.1 with this fixed latency per request")
    p.add_argument("--no-ceiling", action="store_true", help="skip the decode-ceiling measurement")
    p.add_argument("--compile", action="store_true",
                   help="run the compile benchmark (roboreel vs the ffmpeg CLI, alternated; throughput and PSNR) on "
                        "--source, or without one on a synthetic dataset of --episodes x --cameras at "
                        "--height x --width (made under --out, reused)")
    p.add_argument("--compile-workers", default="1,2", help="worker counts to compare (comma-separated)")
    p.add_argument("--compile-repeats", type=int, default=2, help="alternations per worker count")
    p.add_argument("--compile-unit", choices=["clip", "file"], default="clip",
                   help="ffmpeg CLI: one process per episode x camera (the clips roboreel makes) or per source mp4")
    p.add_argument("--compile-psnr-stride", type=int, default=1,
                   help="PSNR of every k-th frame vs the source decode (0: none)")
    p.add_argument("--no-dataloading", action="store_true", help="only the compile benchmark")
    p.add_argument("--resize-bench", metavar="HxW", default=None,
                   help="with --source: compile it at full size and with --resize HxW (alternated), then read both "
                        "through roboreel.loader and LeRobotDataset + Resize(HxW) (--lerobot-python), uint8, "
                        "alternated (roboreel/bench/variants_bench.py)")
    p.add_argument("--images-bench", action="store_true",
                   help="with --source (image features in its data parquet): compile it with --images keep and "
                        "--images clips (alternated), then read both through roboreel.loader and LeRobotDataset "
                        "(--lerobot-python), alternated (roboreel/bench/variants_bench.py)")
    p.add_argument("--episodes-per-shard", type=int, default=None,
                   help="with --resize-bench / --images-bench: episodes per shard of both compiles (default: "
                        "size-based plan)")
    p.add_argument("--soak", type=int, default=None, metavar="EPOCHS",
                   help="soak: EPOCHS epochs with persistent workers, RSS of every process per epoch")
    p.add_argument("--soak-warmup", type=int, default=5, help="with --soak: epochs before growth is measured")
    p.add_argument("--soak-idle-decoders-mb", type=float, default=None,
                   help="with --soak: DecodeOptions.idle_decoders_mb (default: the dataset's default, automatic; "
                        "0: off)")
    p.add_argument("--scale", action="store_true",
                   help="start-up and memory vs episodes in the index (padded indexes of --scale-sizes episodes)")
    p.add_argument("--scale-sizes", default="1000,10000,100000,1000000")
    p.add_argument("--out", default="bench-out", help="directory for JSON/CSV/PNG reports")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from roboreel.bench.runner import RunConfig
    from roboreel.bench.suite import DataSpec, prepare, run_suite
    from roboreel.formats.manifest import load_manifest

    out = Path(args.out)
    if args.scale:
        return _scale(args, out)
    if args.resize_bench or args.images_bench:
        return _variants(args, out)
    if args.prepare:
        spec = DataSpec(episodes=args.episodes, height=args.height, width=args.width, min_length=args.min_length,
                        max_length=args.max_length, cameras=args.cameras, fps=args.fps)
        src, comp = prepare(Path(args.prepare), spec)
        compiled, source = str(comp), str(src)
        compiled = args.compiled or compiled
    elif args.compiled and "," in args.compiled:  # a mixture: only the compiled readers read it
        compiled, source = args.compiled, args.source or ""
    elif args.compiled:
        compiled = args.compiled
        source = args.source or load_manifest(compiled).source.get("url")
        if not source:
            raise ValueError("no --source given and the manifest names no source url")
    elif args.no_dataloading and args.source or args.compile and args.source:
        compiled, source = "", args.source  # the compile benchmark needs only the source
        args.no_dataloading = True
    elif args.compile:
        compiled, source = "", str(_compile_source(args, out))
        args.no_dataloading = True
    else:
        raise ValueError("give a compiled dataset path or --prepare DIR (or --source with --no-dataloading)")
    if args.soak is not None:
        from roboreel.bench.soak import SoakConfig, soak

        doc = soak(compiled, SoakConfig(epochs=args.soak, warmup=args.soak_warmup, batch_size=args.batch_size,
                                        num_workers=args.num_workers,
                                        idle_decoders_mb=args.soak_idle_decoders_mb), out)
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
                        warmup_epochs=args.warmup_epochs, persistent_workers=not args.no_persistent_workers,
                        batches=args.batches, seconds=args.seconds, uint8=args.uint8, span_epochs=not args.one_epoch,
                        decode_threads=args.decode_threads,
                        weights=tuple(float(w) for w in args.weights.split(",")) if args.weights else None)
        run_suite(compiled=compiled, source=source, readers=args.readers.split(","), modes=args.modes.split(","),
                  cfg=cfg, repeats=args.repeats, out=out, remote_latency_ms=args.remote_latency_ms,
                  ceiling=not args.no_ceiling, lerobot_python=args.lerobot_python,
                  isolate=not args.no_isolate)
    if args.compile:
        from roboreel.bench.compile_bench import CompileBenchConfig, compile_benchmark, markdown

        cfg = CompileBenchConfig(workers=tuple(int(w) for w in args.compile_workers.split(",")),
                                 repeats=args.compile_repeats, unit=args.compile_unit,
                                 psnr_stride=args.compile_psnr_stride)
        result = compile_benchmark(source, config=cfg)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compile.json").write_text(json.dumps({"source": source, **result}, indent=1))
        print(f"\ncompile benchmark on {source} ({result['ffmpeg_version']}, ffmpeg unit: {cfg.unit})")
        print(markdown(result))
        print(f"wrote {out}/compile.json")
    return 0


def _compile_source(args: argparse.Namespace, out: Path) -> Path:
    """A synthetic LeRobot v3 dataset (AV1, LeRobot's defaults) for the compile benchmark, made once per shape."""
    from roboreel.synth import SynthConfig, camera_names, synthesize

    root = out / (f"compile-source-{args.height}x{args.width}-{args.episodes}ep-{args.cameras}cam-"
                  f"{args.min_length}-{args.max_length}")
    if not (root / "meta" / "info.json").exists():
        cfg = SynthConfig(episodes=args.episodes, cameras=camera_names(args.cameras), height=args.height,
                          width=args.width, min_length=args.min_length, max_length=args.max_length,
                          video_files_size_in_mb=100.0, data_files_size_in_mb=100.0)
        synthesize(root, cfg, overwrite=True, progress=True)
    return root


def _scale(args: argparse.Namespace, out: Path) -> int:
    import dataclasses

    from roboreel.bench.scale import ScaleConfig, markdown, run_scale
    from roboreel.compile import CompileSettings, compile_dataset
    from roboreel.synth import SynthConfig, camera_names, synthesize

    work = out / "scale-data"
    real = Path(args.compiled) if args.compiled else work / "real"
    if not args.compiled and not (real / "roboreel.json").exists():  # 16 episodes, 3 cameras: the real part
        src = work / "real-src"
        synthesize(src, SynthConfig(episodes=16, min_length=40, max_length=60, height=96, width=128,
                                    cameras=camera_names(3)), overwrite=True)
        settings = dataclasses.replace(CompileSettings(), episodes_per_shard=4)
        compile_dataset(str(src), str(real), settings=settings, overwrite=True)
    cfg = ScaleConfig(sizes=tuple(int(x) for x in args.scale_sizes.split(",")), batch_size=args.batch_size,
                      num_workers=args.num_workers)
    rows = run_scale(work, real, cfg, out)
    print("\n" + markdown(rows))
    print(f"wrote {out}/scale.json, scale.csv, scale.png")
    return 0


def _variants(args: argparse.Namespace, out: Path) -> int:
    import json

    from roboreel.bench.runner import RunConfig
    from roboreel.bench.variants_bench import images_benchmark, markdown, resize_benchmark

    if not args.source:
        raise ValueError("--resize-bench / --images-bench need --source SRC (a LeRobot v3 dataset)")
    cfg = RunConfig(batch_size=args.batch_size, num_workers=args.num_workers, prefetch=args.prefetch,
                    warmup_batches=args.warmup, warmup_epochs=args.warmup_epochs, batches=args.batches,
                    seconds=args.seconds, decode_threads=args.decode_threads)
    workers = max(int(x) for x in args.compile_workers.split(","))
    from roboreel.compile import CompileSettings

    common = {"out": out, "cfg": cfg, "repeats": args.repeats, "compile_repeats": args.compile_repeats,
              "workers": workers, "settings": CompileSettings(episodes_per_shard=args.episodes_per_shard),
              "lerobot_python": args.lerobot_python}
    if args.images_bench:
        result, name = images_benchmark(args.source, **common), "images"
    else:
        h, w = (int(x) for x in args.resize_bench.lower().split("x"))
        result, name = resize_benchmark(args.source, size=(h, w), **common), "resize"
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    print("\n" + markdown(result))
    print(f"wrote {out}/{name}.json")
    return 0
