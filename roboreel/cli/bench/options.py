"""Option groups that several ``roboreel bench`` subcommands share, each defined once here.

Names follow the Python API they feed (``CompiledDataset``, ``roboreel.loader``, ``torch.utils.data.DataLoader``),
so a flag reads the same as the keyword it sets.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from roboreel.cli.doctor import decode_device

if TYPE_CHECKING:
    from roboreel.bench.config import RunConfig

DEFAULT_OUT = "bench-out"


def out_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=DEFAULT_OUT, type=Path, metavar="DIR",
                   help="directory for the JSON/CSV/PNG reports")


def dataset_options(p: argparse.ArgumentParser, *, prepare: bool) -> None:
    """The shape of a synthetic dataset (the standard benchmark set: 3 cameras, 20 fps, 224x224); with
    ``prepare``, ``--prepare DIR`` synthesises and compiles it there (once) and the run reads it."""
    g = p.add_argument_group("synthetic dataset" + (" (with --prepare)" if prepare else " (without --source)"))
    if prepare:
        g.add_argument("--prepare", metavar="DIR", default=None,
                       help="synthesise + compile the benchmark dataset into DIR unless already there, and read "
                            "DIR/compiled (default: none, read COMPILED)")
    g.add_argument("--episodes", type=int, metavar="N", default=40, help="episodes")
    g.add_argument("--cameras", type=int, metavar="N", default=3, help="cameras")
    g.add_argument("--height", type=int, metavar="N", default=224, help="frame height")
    g.add_argument("--width", type=int, metavar="N", default=224, help="frame width")
    g.add_argument("--fps", type=int, metavar="N", default=20, help="frames per second")
    g.add_argument("--min-length", type=int, metavar="N", default=150, help="shortest episode (frames)")
    g.add_argument("--max-length", type=int, metavar="N", default=250, help="longest episode (frames)")


def loader_options(p: argparse.ArgumentParser, *, full: bool) -> None:
    """DataLoader / ``roboreel.loader`` / ``CompiledDataset`` knobs of every reader in a run. ``full``: also the
    ones only the dataloading comparison (``bench read``) varies."""
    g = p.add_argument_group("readers (as the Python API names them)")
    g.add_argument("--batch-size", type=int, metavar="N", default=32, help="samples per batch")
    g.add_argument("--num-workers", type=int, metavar="N", default=2, help="DataLoader workers")
    g.add_argument("--prefetch-factor", type=int, metavar="N", default=2,
                   help="DataLoader's prefetch_factor: batches each worker has ready ahead")
    g.add_argument("--prefetch-batches", type=int, metavar="N", default=2,
                   help="roboreel.loader's prefetch_batches: decoded batches kept ready ahead of the loop")
    g.add_argument("--decode-threads", type=int, metavar="N", default=None,
                   help="roboreel.loader's decode threads (default: the available cores)")
    if not full:
        return
    g.add_argument("--persistent-workers", action=argparse.BooleanOptionalAction, default=True,
                   help="DataLoader workers live across epochs, as lerobot-train runs them (--no-persistent-workers: "
                        "new workers every epoch)")
    g.add_argument("--episode-pool-size", type=int, metavar="N", default=None,
                   help="CompiledDataset's episode_pool_size (default: the dataset's own)")
    g.add_argument("--decode-device", default="cpu", metavar="DEVICE", type=decode_device,
                   help="the decode device (where frames decode), DecodeOptions(device=...): cpu, cuda or cuda:N")


def return_uint8_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--return-uint8", action="store_true",
                   help="camera frames as uint8 for every reader, normalised on the GPU (default: float32 in [0, 1])")


def window_options(p: argparse.ArgumentParser) -> None:
    """What each run times: warm-up, then a steady window of batches (or seconds); runs alternated."""
    g = p.add_argument_group("measurement")
    g.add_argument("--warmup-batches", type=int, metavar="N", default=3,
                   help="warm-up batches excluded from the steady window")
    g.add_argument("--warmup-epochs", type=int, metavar="N", default=0,
                   help="whole epochs each run reads untimed first; the steady window is then in the next epoch "
                        "(the steady state of a long training run; first batch and peak RSS still count them)")
    g.add_argument("--batches", type=int, metavar="N", default=40, help="batches in the steady window")
    g.add_argument("--seconds", type=float, metavar="S", default=None,
                   help="steady window length in seconds instead of --batches (default: none, count batches)")
    g.add_argument("--repeats", type=int, metavar="N", default=3, help="A B A B ... alternations of the readers")


def lerobot_python_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lerobot-python", default=None, metavar="PYTHON",
                   help="run the LeRobotDataset reader in this interpreter: LeRobot's own venv, e.g. "
                        ".venv-lerobot/bin/python (default: none, this interpreter, if LeRobot imports here)")


def run_config(args: argparse.Namespace, **extra: object) -> RunConfig:
    """The ``RunConfig`` of the options above that ``args`` has (a subcommand defines only some)."""
    from roboreel.bench.config import RunConfig

    names = ("batch_size", "num_workers", "prefetch_factor", "prefetch_batches", "decode_threads",
             "persistent_workers", "episode_pool_size", "decode_device", "return_uint8", "warmup_batches",
             "warmup_epochs", "batches", "seconds")
    return RunConfig(**{n: getattr(args, n) for n in names if hasattr(args, n)}, **extra)
