"""``roboreel.loader`` keeps its DataLoader workers across epochs by default, and every epoch is still
the one the trainer asked for: ``set_epoch`` made after the first epoch reaches persistent workers (their copies of
the dataset are made once; reader/board.py), ``len()``, ``state_dict`` / ``load_state_dict`` in epoch 2+
(a fresh loader and the live one), iterating without ``set_epoch``, and ``close()``. Batches are compared bit for
bit, and frames by their pixel codes, against a plain ``DataLoader(CompiledDataset)`` with workers forked anew
every epoch (the copy is then always current), over whole epochs.
"""

from __future__ import annotations

import json

import pytest
import torch
from support.datasets import codes, compiled_pair
from support.resume import assert_same_batches
from torch.utils.data import DataLoader

import roboreel
from roboreel.reader import CompiledDataset

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")
CAMERAS = ["observation.images.top", "observation.images.wrist"]
WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.1, 0.0]}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes of 12-30 frames, 2 cameras), 2 episodes per shard."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


def _ds(path, **kw) -> CompiledDataset:
    return CompiledDataset(str(path), episode_pool_size=3, seed=11, return_uint8=True, delta_timestamps=WINDOWS,
                           **kw)


def _want(path, epoch: int, *, batch_size: int = 4, num_workers: int = 2) -> list[dict]:
    """Epoch ``epoch`` from workers forked for it alone (a fresh copy of a dataset set to that epoch)."""
    ds = _ds(path)
    ds.set_epoch(epoch)
    return list(DataLoader(ds, batch_size=batch_size, num_workers=num_workers))


def _assert_same(got: list[dict], want: list[dict]) -> None:
    assert_same_batches(got, want)
    for g, w in zip(got, want, strict=True):  # and the frames are the right ones
        for cam in CAMERAS:
            assert [codes(a) for a in g[cam]] == [codes(b) for b in w[cam]]


def _pids(dl) -> list[int]:
    return [w.pid for w in dl.dataloader._iterator._workers]


def test_workers_persist_by_default_and_every_set_epoch_reaches_them(compiled):
    """Epochs out of order (1, 5, 5 again, 2): persistent workers' copies would otherwise count epochs on their
    own (1, 2, 3, 4); each epoch equals a fresh-worker run of it and the workers are the same processes."""
    ds = _ds(compiled)
    dl = roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=2, decode_threads=2)
    assert dl.dataloader.persistent_workers
    pids = None
    for epoch in (1, 5, 5, 2):
        dl.set_epoch(epoch)
        got = list(dl)
        assert len(got) == len(dl)
        _assert_same(got, _want(compiled, epoch))
        pids = pids or _pids(dl)
        assert _pids(dl) == pids
    assert len({tuple(b["index"].tolist()) for b in _want(compiled, 1)} & {tuple(b["index"].tolist())
                                                                           for b in _want(compiled, 5)}) < len(got)


def test_three_epochs_equal_with_and_without_persistent_workers(compiled):
    got = {}
    for persistent in (True, False):
        ds = _ds(compiled)
        dl = roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=2, decode_threads=2, persistent_workers=persistent)
        got[persistent] = []
        for epoch in range(3):
            dl.set_epoch(epoch)
            got[persistent].append(list(dl))
        dl.close()
    for epoch in range(3):
        _assert_same(got[True][epoch], got[False][epoch])
        _assert_same(got[True][epoch], _want(compiled, epoch))


@pytest.mark.parametrize("persistent", [True, False])
def test_iterating_again_without_set_epoch_reads_the_next_epoch(compiled, persistent):
    """As iterating the dataset in one process does; ``state_dict`` names the epoch the workers read."""
    ds = _ds(compiled)
    dl = roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=2, decode_threads=2, persistent_workers=persistent)
    dl.set_epoch(3)
    for epoch in (3, 4, 5):
        it = iter(dl)
        first = next(it)
        assert dl.state_dict()["epoch"] == epoch and dl.state_dict()["batches"] == 1
        _assert_same([first, *it], _want(compiled, epoch))


def test_resume_mid_epoch_in_epoch_two_with_a_fresh_loader_and_with_the_live_one(compiled):
    """Epochs 0 and 1 whole, 3 batches of epoch 2, save. Then (a) a new loader (new persistent workers) and (b) the
    same loader, whose persistent workers were already in epoch 2, each continue epoch 2 and read epoch 3 whole."""
    want2, want3 = _want(compiled, 2), _want(compiled, 3)
    ds = _ds(compiled)
    dl = roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=2, decode_threads=2, prefetch_batches=3)
    for epoch in (0, 1):
        dl.set_epoch(epoch)
        assert sum(1 for _ in dl) == len(dl)
    dl.set_epoch(2)
    it = iter(dl)
    first = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(dl.state_dict()))
    assert state["epoch"] == 2 and state["batches"] == 3
    del it  # batches decoded ahead of the loop are not counted: none is skipped on resume
    pids = _pids(dl)

    fresh = roboreel.loader(_ds(compiled), mix_workers=False, batch_size=4, num_workers=2, decode_threads=2)
    fresh.load_state_dict(state)
    rest = list(fresh)
    _assert_same(first + rest, want2)
    fresh.set_epoch(3)
    _assert_same(list(fresh), want3)
    fresh.close()

    dl.load_state_dict(state)  # the live loader: its persistent workers take the state at the next epoch start
    again = iter(dl)
    head = next(again)
    assert dl.state_dict()["batches"] == 4
    _assert_same(first + [head, *again], want2)
    assert _pids(dl) == pids
    dl.set_epoch(3)
    _assert_same(list(dl), want3)


def test_plain_dataloader_with_persistent_workers_follows_set_epoch_and_resume(compiled):
    """The board is the dataset's: ``DataLoader(CompiledDataset, persistent_workers=True)`` gets it too."""
    ds = _ds(compiled)
    dl = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    for epoch in (0, 4):
        ds.set_epoch(epoch)
        assert_same_batches(list(dl), _want(compiled, epoch))
    ds.set_epoch(2)
    it = iter(dl)
    first = [next(it) for _ in range(2)]
    state = ds.state_dict(batches=2, loader=dl)
    del it
    ds.load_state_dict(state)
    assert_same_batches(first + list(dl), _want(compiled, 2))


def test_close_stops_persistent_workers_and_a_later_iteration_starts_new_ones(compiled):
    ds = _ds(compiled)
    dl = roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=2, decode_threads=2)
    dl.set_epoch(0)
    it = iter(dl)
    next(it)
    workers = list(dl.dataloader._iterator._workers)
    dl.close()
    assert not any(w.is_alive() for w in workers)
    del it
    dl.set_epoch(6)
    _assert_same(list(dl), _want(compiled, 6))
    assert not set(_pids(dl)) & {w.pid for w in workers}
    dl.close()
    assert torch.utils.data.get_worker_info() is None


def test_the_board_reaches_spawned_persistent_workers(compiled):
    """Under spawn the dataset is pickled into the worker; the board's shared memory goes with it."""
    ds = _ds(compiled)
    dl = DataLoader(ds, batch_size=4, num_workers=1, persistent_workers=True, multiprocessing_context="spawn")
    for epoch in (0, 3):
        ds.set_epoch(epoch)
        assert_same_batches(list(dl), _want(compiled, epoch, num_workers=1))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_state_saved_before_the_first_batch_of_an_epoch_resumes_that_epoch_whole(compiled, num_workers):
    """A trainer may save before iterating: after ``set_epoch`` for the next epoch, or right after
    ``load_state_dict``. The state must name that epoch and what of it was returned: once it held the finished
    epoch's batch count under the new epoch (workers: the resumed epoch came out empty) or batch 0 of a loaded
    mid-epoch state (its first batches came out twice)."""
    want1, want2 = _want(compiled, 1, num_workers=num_workers), _want(compiled, 2, num_workers=num_workers)
    dl = roboreel.loader(_ds(compiled), mix_workers=False, batch_size=4, num_workers=num_workers, decode_threads=2)
    dl.set_epoch(1)
    assert sum(1 for _ in dl) == len(want1)
    dl.set_epoch(2)
    state = json.loads(json.dumps(dl.state_dict()))
    assert (state["epoch"], state["batches"]) == (2, 0)
    dl.close()
    fresh = roboreel.loader(_ds(compiled), mix_workers=False, batch_size=4, num_workers=num_workers, decode_threads=2)
    fresh.load_state_dict(state)
    fresh.set_epoch(2)
    _assert_same(list(fresh), want2)
    fresh.close()

    dl = roboreel.loader(_ds(compiled), mix_workers=False, batch_size=4, num_workers=num_workers, decode_threads=2)
    dl.set_epoch(1)
    it = iter(dl)
    head = [next(it) for _ in range(3)]
    mid = json.loads(json.dumps(dl.state_dict()))
    del it
    dl.close()
    dl = roboreel.loader(_ds(compiled), mix_workers=False, batch_size=4, num_workers=num_workers, decode_threads=2)
    dl.load_state_dict(mid)
    dl.set_epoch(1)  # the loop's usual set_epoch at the resumed epoch keeps the resume point
    saved = json.loads(json.dumps(dl.state_dict()))
    assert (saved["epoch"], saved["batches"]) == (1, 3)
    dl.close()
    again = roboreel.loader(_ds(compiled), mix_workers=False, batch_size=4, num_workers=num_workers, decode_threads=2)
    again.load_state_dict(saved)
    _assert_same(head + list(again), want1)
    again.close()


def test_a_state_from_another_batch_size_or_drop_last_is_refused(compiled):
    """The loader counts batches on from the saved count: with another batch size, a state saved after the
    resume put the stream at the wrong sample (samples skipped on the next resume), with no error."""
    dl = roboreel.loader(_ds(compiled), mix_workers=False, batch_size=4, num_workers=0, decode_threads=2)
    dl.set_epoch(1)
    it = iter(dl)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(dl.state_dict()))
    del it
    dl.close()
    for kw, name in (({"batch_size": 8}, "batch_size=4"), ({"batch_size": 4, "drop_last": True}, "drop_last=False")):
        other = roboreel.loader(_ds(compiled), mix_workers=False, num_workers=0, decode_threads=2, **kw)
        with pytest.raises(ValueError, match=name):
            other.load_state_dict(state)
        other.close()
