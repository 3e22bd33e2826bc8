"""A shared resume harness: stop after k batches, save, restore into a fresh dataset and loader, compare.

Works for any dataset with ``state_dict`` / ``load_state_dict`` / ``set_epoch`` (the reader's contract, after
torchdata.nodes' ``run_test_save_load_state``): the batches before the stop plus the batches after the resume
must equal one uninterrupted run, exactly (same samples, same order, same values).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader


def loader(ds: Any, *, batch_size: int, num_workers: int, drop_last: bool = False) -> DataLoader:
    return DataLoader(ds, batch_size=batch_size, num_workers=num_workers, drop_last=drop_last)


def assert_same_batches(got: Sequence[dict[str, Any]], want: Sequence[dict[str, Any]]) -> None:
    assert len(got) == len(want), (len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert list(g) == list(w), i
        for k in w:
            if isinstance(w[k], torch.Tensor):
                assert g[k].dtype == w[k].dtype and torch.equal(g[k], w[k]), (i, k)
            else:
                assert g[k] == w[k], (i, k)


def save_after(make: Callable[[], Any], k: int, *, batch_size: int, num_workers: int, drop_last: bool = False,
               in_process: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run ``k`` batches of a fresh dataset, return them and the saved state (round-tripped through JSON)."""
    ds = make()
    dl = loader(ds, batch_size=batch_size, num_workers=num_workers, drop_last=drop_last)
    it = iter(dl)
    first = [next(it) for _ in range(k)]
    state = ds.state_dict() if in_process else ds.state_dict(batches=k, loader=dl)
    del it  # shuts the workers down mid-epoch, like a killed job
    return first, json.loads(json.dumps(state))


def check_resume(make: Callable[[], Any], ks: Sequence[int], *, batch_size: int, num_workers: int,
                 drop_last: bool = False, in_process: bool = False) -> list[dict[str, Any]]:
    """For every k: k batches, save, resume in a fresh dataset, and the concatenation equals one full run."""
    full = list(loader(make(), batch_size=batch_size, num_workers=num_workers, drop_last=drop_last))
    for k in ks:
        first, state = save_after(make, k, batch_size=batch_size, num_workers=num_workers, drop_last=drop_last,
                                  in_process=in_process)
        ds = make()
        ds.load_state_dict(state)
        rest = list(loader(ds, batch_size=batch_size, num_workers=num_workers, drop_last=drop_last))
        assert_same_batches(first + rest, full)
    return full
