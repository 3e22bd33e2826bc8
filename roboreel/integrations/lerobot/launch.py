"""Run LeRobot's own ``lerobot-train`` with roboreel's dataset: two names patched for the duration of the run.

1. ``lerobot.scripts.lerobot_train.make_train_eval_datasets`` (the name the script imported) -> datasets.py;
   its ``save_checkpoint`` also writes roboreel's own options into the checkpoint (``--resume`` compares
   them).
2. ``accelerate.Accelerator.prepare_data_loader``, for a DataLoader over a ``CompiledDataset`` only: accelerate
   would either make rank 0 read everything and broadcast slices (``dispatch_batches``, its default for an
   IterableDataset) or make every rank read everything and keep a slice (``IterableDatasetShard``). A
   CompiledDataset already reads only its rank's split with equal steps per rank, so it is prepared as a
   one-process loader: batches on the accelerator's device, ``set_epoch(n)`` on every pass (accelerate's
   DataLoaderShard does that), nothing sharded twice. Which loader (``--roboreel.loader``): loading.py.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from roboreel.integrations.lerobot.options import LoaderOptions

logger = logging.getLogger(__name__)

LEROBOT_MISSING = ("roboreel lerobot-train needs LeRobot 0.6 with its training extras: pip install 'roboreel[lerobot]' "
                   "(or pip install 'lerobot[training]>=0.6')")


def lerobot_available() -> tuple[bool, str]:
    """(True, "") when LeRobot's training script imports here, else (False, why)."""
    try:
        import accelerate  # noqa: F401
        import lerobot.scripts.lerobot_train  # noqa: F401
    except ImportError as e:
        return False, f"{type(e).__name__}: {e}"
    return True, ""


@contextlib.contextmanager
def patched(options: LoaderOptions | None = None) -> Iterator[None]:
    """LeRobot's training script with roboreel's dataset factory and per-rank loader preparation."""
    import accelerate
    import lerobot.scripts.lerobot_train as script
    from accelerate.data_loader import prepare_data_loader

    from roboreel.integrations.lerobot.datasets import make_train_eval_datasets, mixture_options, save_options
    from roboreel.integrations.lerobot.loading import StageLoader, stage_unsupported
    from roboreel.reader.dataset import CompiledDataset
    from roboreel.reader.mixture import MixtureDataset

    options = options or LoaderOptions()
    original_prepare = accelerate.Accelerator.prepare_data_loader

    def prepare(self: Any, data_loader: Any, device_placement: bool | None = None,
                slice_fn_for_dispatch: Any = None) -> Any:
        if not isinstance(getattr(data_loader, "dataset", None), CompiledDataset | MixtureDataset):
            return original_prepare(self, data_loader, device_placement=device_placement,
                                    slice_fn_for_dispatch=slice_fn_for_dispatch)
        dataset = data_loader.dataset
        put_on_device = self.device_placement if device_placement is None else device_placement
        if options.loader == "stage":
            why_not = stage_unsupported(data_loader)
            if why_not is None:
                stage = StageLoader.replacing(data_loader, device=self.device if put_on_device else None,
                                              decode_threads=options.decode_threads,
                                              mix_workers=options.mix_workers)
                self._dataloaders.append(stage)
                return stage
            logger.warning("roboreel: the decode stage cannot read this DataLoader (%s): its workers decode",
                           why_not)
        prepared = prepare_data_loader(
            data_loader, self.device, num_processes=1, process_index=0,  # the dataset splits by rank itself
            put_on_device=put_on_device,
            dispatch_batches=False, non_blocking=self.non_blocking)
        prepared.iteration = dataset.epoch  # passes continue from the dataset's epoch (resume)
        self._dataloaders.append(prepared)
        return prepared

    original_save = script.save_checkpoint

    def save_checkpoint(checkpoint_dir: Any, *args: Any, **kwargs: Any) -> None:
        original_save(checkpoint_dir, *args, **kwargs)
        save_options(Path(checkpoint_dir), mixture_options(options.weights, options.mixture, options.pad))

    saved_factory = script.make_train_eval_datasets
    script.make_train_eval_datasets = partial(make_train_eval_datasets, weights=options.weights,
                                              mixture=options.mixture, pad=options.pad)
    script.save_checkpoint = save_checkpoint
    accelerate.Accelerator.prepare_data_loader = prepare
    try:
        yield
    finally:
        script.make_train_eval_datasets = saved_factory
        script.save_checkpoint = original_save
        accelerate.Accelerator.prepare_data_loader = original_prepare


def main(argv: Sequence[str]) -> int:
    """``lerobot-train ARGV`` on a compiled dataset (``--dataset.root``); LeRobot parses ARGV from sys.argv,
    after roboreel's own ``--roboreel.*`` options are taken out (loading.LoaderOptions)."""
    options, argv = LoaderOptions.from_argv(argv)
    ok, why = lerobot_available()
    if not ok:
        print(f"{LEROBOT_MISSING}\n({why})", file=sys.stderr)
        return 1
    import lerobot.scripts.lerobot_train as script

    saved_argv = sys.argv
    sys.argv = ["lerobot-train", *argv]
    try:
        with patched(options):
            script.main()
    finally:
        sys.argv = saved_argv
    return 0
