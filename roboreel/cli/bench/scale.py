"""``roboreel bench scale``: start-up and memory against the number of episodes in the index."""

from __future__ import annotations

import argparse

from roboreel.cli.bench import options

DESCRIPTION = """Scale benchmark: a real small compiled dataset (COMPILED, or 16 synthetic episodes x 3 cameras made
under --out) whose index is padded to each of --sizes episodes; per size, in a fresh process: construct time,
pickled size, index memory and the first batch through a DataLoader with workers. Writes --out/scale.json, .csv,
.png."""


# ScaleConfig's defaults, written out: importing roboreel.bench.scale (numpy, pyarrow) would slow every --help
SIZES, BATCH_SIZE, NUM_WORKERS = (1_000, 10_000, 100_000, 1_000_000), 16, 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scale", help="start-up and memory vs episodes in the index (up to a million)",
                       description=DESCRIPTION)
    p.add_argument("compiled", nargs="?", default=None, metavar="COMPILED",
                   help="the real part: a compiled dataset (default: 16 synthetic episodes under OUT/scale-data)")
    p.add_argument("--sizes", default=",".join(str(n) for n in SIZES), metavar="N1,N2,...",
                   help="episodes in the padded index, one measurement each")
    p.add_argument("--batch-size", type=int, metavar="N", default=BATCH_SIZE, help="samples per batch")
    p.add_argument("--num-workers", type=int, metavar="N", default=NUM_WORKERS, help="DataLoader workers")
    options.out_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    from pathlib import Path

    from roboreel.bench.scale import ScaleConfig, markdown, run_scale
    from roboreel.compile import CompileSettings, compile_dataset
    from roboreel.synth import SynthConfig, camera_names, synthesize

    work = args.out / "scale-data"
    real = Path(args.compiled) if args.compiled else work / "real"
    if not args.compiled and not (real / "roboreel.json").exists():  # 16 episodes, 3 cameras: the real part
        src = work / "real-src"
        synthesize(src, SynthConfig(episodes=16, min_length=40, max_length=60, height=96, width=128,
                                    cameras=camera_names(3)), overwrite=True)
        settings = dataclasses.replace(CompileSettings(), episodes_per_shard=4)
        compile_dataset(str(src), str(real), settings=settings, overwrite=True)
    cfg = ScaleConfig(sizes=tuple(int(x) for x in args.sizes.split(",")), batch_size=args.batch_size,
                      num_workers=args.num_workers)
    rows = run_scale(work, real, cfg, args.out)
    print("\n" + markdown(rows, num_workers=cfg.num_workers))
    print(f"wrote {args.out}/scale.json, scale.csv, scale.png")
    return 0
