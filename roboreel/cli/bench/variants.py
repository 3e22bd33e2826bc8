"""``roboreel bench resize`` / ``roboreel bench images``: compile one source two ways and read both
(roboreel/bench/variants_bench.py): what a compile option costs and what it buys."""

from __future__ import annotations

import argparse
import json

from roboreel.cli.bench import options

_READ = """Then reads both compiles through roboreel.loader and the source through LeRobotDataset (--lerobot-python),
alternated, each run in a fresh process; writes --out/{name}.json and prints a table."""

RESIZE = f"""Resize benchmark: compiles SRC at full size and with --resize HxW (alternated, --compile-repeats),
and LeRobotDataset reads SRC with torchvision's Resize(HxW) as its image transform; uint8 frames.
{_READ.format(name="resize")}"""

IMAGES = f"""Image-features benchmark: compiles SRC (image features in its data parquet) with --images keep and
--images clips (alternated, --compile-repeats). {_READ.format(name="images")}"""


def _size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(x) for x in text.lower().split("x"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--size must be HxW (e.g. 224x224), got {text!r}") from e
    return h, w


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="SRC", help="LeRobot v3 dataset (local path or fsspec URL)")
    p.add_argument("--workers", type=int, metavar="N", default=2, help="compile workers of every compile")
    p.add_argument("--compile-repeats", type=int, metavar="N", default=2, help="alternations of the two compiles")
    p.add_argument("--episodes-per-shard", type=int, metavar="N", default=None,
                   help="episodes per shard of both compiles (default: the size-based plan)")
    options.lerobot_python_option(p)
    options.loader_options(p, full=False)
    options.window_options(p)
    options.out_option(p)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("resize", help="full size vs --resize HxW at compile, against LeRobotDataset + Resize",
                       description=RESIZE)
    _common(p)
    p.add_argument("--size", type=_size, required=True, metavar="HxW", help="the resized variant's frame size")
    p.set_defaults(func=run, variant="resize")
    p = sub.add_parser("images", help="image features kept as encoded images vs compiled as HEVC clips",
                       description=IMAGES)
    _common(p)
    options.return_uint8_option(p)
    p.set_defaults(func=run, variant="images")


def run(args: argparse.Namespace) -> int:
    from roboreel.bench.variants_bench import images_benchmark, markdown, resize_benchmark
    from roboreel.compile import CompileSettings

    common = {"out": args.out, "cfg": options.run_config(args), "repeats": args.repeats,
              "compile_repeats": args.compile_repeats, "workers": args.workers,
              "settings": CompileSettings(episodes_per_shard=args.episodes_per_shard),
              "lerobot_python": args.lerobot_python}
    if args.variant == "images":
        result = images_benchmark(args.source, **common)
    else:
        result = resize_benchmark(args.source, size=args.size, **common)
    (args.out / f"{args.variant}.json").write_text(json.dumps(result, indent=1))
    print("\n" + markdown(result))
    print(f"wrote {args.out}/{args.variant}.json")
    return 0
