"""``roboreel bench soak``: memory over many epochs (roboreel/bench/soak.py)."""

from __future__ import annotations

import argparse

from roboreel.cli.bench import options

DESCRIPTION = """Soak benchmark: --epochs epochs through one DataLoader with persistent workers, RSS of every process
after each epoch; prints each process's growth after the warm-up epochs and writes --out/soak.json and soak.csv.
Small robot datasets are trained for hundreds of epochs: memory that creeps per epoch matters more than a peak."""


def register(sub: argparse._SubParsersAction) -> None:
    from roboreel.bench.soak import SoakConfig

    d = SoakConfig()
    p = sub.add_parser("soak", help="RSS of every process over many epochs (memory growth)", description=DESCRIPTION)
    p.add_argument("compiled", nargs="?", default=None, metavar="COMPILED",
                   help="compiled dataset (default: PREPARE/compiled)")
    p.add_argument("--epochs", type=int, metavar="N", default=d.epochs, help="epochs to read")
    p.add_argument("--warmup-epochs", type=int, metavar="N", default=d.warmup_epochs,
                   help="epochs before growth is measured")
    p.add_argument("--idle-decoders-mb", type=float, metavar="MB", default=None,
                   help="DecodeOptions.idle_decoders_mb (default: the dataset's own, automatic; 0: off)")
    p.add_argument("--batch-size", type=int, metavar="N", default=d.batch_size, help="samples per batch")
    p.add_argument("--num-workers", type=int, metavar="N", default=d.num_workers,
                   help="DataLoader workers (persistent)")
    options.dataset_options(p, prepare=True)
    options.out_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from roboreel.bench.soak import SoakConfig, soak
    from roboreel.bench.suite import DataSpec, prepare

    compiled = args.compiled
    if args.prepare and not compiled:
        spec = DataSpec(episodes=args.episodes, height=args.height, width=args.width, min_length=args.min_length,
                        max_length=args.max_length, cameras=args.cameras, fps=args.fps)
        compiled = str(prepare(Path(args.prepare), spec)[1])
    if not compiled:
        raise ValueError("give a compiled dataset COMPILED or --prepare DIR")
    cfg = SoakConfig(epochs=args.epochs, warmup_epochs=args.warmup_epochs, batch_size=args.batch_size,
                     num_workers=args.num_workers, idle_decoders_mb=args.idle_decoders_mb)
    doc = soak(compiled, cfg, args.out)
    print("\n| process | RSS after warm-up (MB) | RSS at the end (MB) | growth | slope (MB/epoch) |\n"
          "|---|---|---|---|---|")
    for k, g in doc["growth"].items():
        print(f"| {k} | {g['after_warmup_mb']:.0f} | {g['end_mb']:.0f} | {g['growth_pct']:+.2f}% "
              f"| {g['slope_mb_per_epoch']:+.3f} |")
    print(f"wrote {args.out}/soak.json and {args.out}/soak.csv")
    return 0
