"""What each epoch's start costs the README's training loop (issue 25), epoch by epoch.

``roboreel.loader(ds, batch_size=B, num_workers=W)`` with ``set_epoch`` each epoch, as the README writes it; per
epoch: ``iter()`` (with persistent workers, torch's ``_reset`` of their iterators), the first batch the workers
hand over (they plan the epoch and fill their episode pools first), the first decoded batch, the epoch's wall time,
and the decode stage's decoder opens / reuses (the idle-decoder cache takes them back from the third epoch).

    python scripts/epoch_costs.py COMPILED [--epochs 6] [--batch-size 16] [--num-workers 2] [--no-persistent]
"""

from __future__ import annotations

import argparse
import time

import roboreel
import roboreel.reader.loader as loader_module
from roboreel.reader import CompiledDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("compiled")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--no-persistent", action="store_true", help="persistent_workers=False (the old default)")
    args = p.parse_args()

    marks: dict[str, float] = {}
    dataloader_iter = loader_module.DataLoader.__iter__

    def timed_iter(self):  # the DataLoader iterator the decode stage reads, timed to its first batch
        t = time.perf_counter()
        it = dataloader_iter(self)
        marks["reset"] = time.perf_counter() - t

        def gen():
            first = True
            for x in it:
                if first:
                    marks["first_pending"], first = time.perf_counter() - marks["t0"], False
                yield x
        return gen()

    loader_module.DataLoader.__iter__ = timed_iter
    ds = CompiledDataset(args.compiled, return_uint8=True)
    extra = {"persistent_workers": False} if args.no_persistent and args.num_workers else {}
    dl = roboreel.loader(ds, batch_size=args.batch_size, num_workers=args.num_workers, **extra)
    for epoch in range(args.epochs):
        dl.set_epoch(epoch)
        before = dl.stats()
        marks.clear()
        marks["t0"] = t0 = time.perf_counter()
        it = iter(dl)
        t_iter = time.perf_counter() - t0
        next(it)
        t_first = time.perf_counter() - t0
        n = 1 + sum(1 for _ in it)
        wall = time.perf_counter() - t0
        st = dl.stats()
        print(f"epoch {epoch}: iter() {t_iter * 1e3:.0f} ms (DataLoader iter {marks['reset'] * 1e3:.0f}), "
              f"workers' first batch {marks['first_pending'] * 1e3:.0f} ms, first decoded batch {t_first * 1e3:.0f} "
              f"ms, epoch {wall:.2f} s ({n} batches, {len(ds) / wall:.0f} samples/s), decoder opens "
              f"{st['decoder_opens'] - before['decoder_opens']} reuses {st['decoder_reuses'] - before['decoder_reuses']}",
              flush=True)
    dl.close()


if __name__ == "__main__":
    main()
