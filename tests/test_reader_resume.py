"""Exact resume: stop after k batches (workers 0 and 2), restore, and the stream continues at the next sample."""

from __future__ import annotations

import itertools
import json

import pytest
from support.datasets import compiled_pair
from support.resume import assert_same_batches, check_resume, loader, save_after

from roboreel.reader import CompiledDataset
from roboreel.reader.plan._resume import consumed_per_worker, worker_batches

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")
WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.05, 0.0]}


def _simulate(samples: list[int], batch_size: int, drop_last: bool) -> list[tuple[int, int]]:
    """DataLoader's in-order delivery, step by step: (worker, samples it has emitted) after each batch."""
    left = [worker_batches(n, batch_size, drop_last) for n in samples]
    done = [0] * len(samples)
    out = []
    for w in itertools.cycle(range(len(samples))):
        if not any(left):
            break
        if left[w]:
            left[w] -= 1
            done[w] = min(done[w] + batch_size, samples[w])
            out.append(tuple(done))
    return out


@pytest.mark.parametrize("drop_last", [False, True])
def test_consumed_per_worker_matches_round_robin(drop_last):
    for samples in ([10], [7, 3], [12, 0, 5], [1, 40, 8, 8], [0, 0]):
        steps = _simulate(samples, 4, drop_last)
        assert consumed_per_worker(0, samples, batch_size=4, drop_last=drop_last) == [0] * len(samples)
        for b, want in enumerate(steps, start=1):
            assert tuple(consumed_per_worker(b, samples, batch_size=4, drop_last=drop_last)) == want
        with pytest.raises(ValueError, match="more than"):
            consumed_per_worker(len(steps) + 1, samples, batch_size=4, drop_last=drop_last)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


def _make(path, epoch=0, **kw):
    def make():
        ds = CompiledDataset(str(path), delta_timestamps=WINDOWS, episode_pool_size=3, seed=5, **kw)
        ds.set_epoch(epoch)
        return ds

    return make


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_epoch_equals_uninterrupted(compiled, num_workers):
    full = check_resume(_make(compiled, epoch=1), [1, 5, 13], batch_size=7, num_workers=num_workers)
    assert len(full) >= 23
    # the same, ending exactly at the epoch's end and with drop_last
    n = len(full)
    check_resume(_make(compiled, epoch=1), [n], batch_size=7, num_workers=num_workers)
    check_resume(_make(compiled, epoch=1), [4], batch_size=7, num_workers=num_workers, drop_last=True)


def test_resume_counting_in_process(compiled):
    """Iterating without workers, ``state_dict()`` counts what the iterator yielded (no arguments needed)."""
    check_resume(_make(compiled), [3, 11], batch_size=6, num_workers=0, in_process=True)


def test_resume_at_epoch_end_then_next_epoch(compiled):
    make = _make(compiled, epoch=2)
    n = len(list(loader(make(), batch_size=8, num_workers=2)))
    _, state = save_after(make, n, batch_size=8, num_workers=2)
    ds = make()
    ds.load_state_dict(state)
    assert list(loader(ds, batch_size=8, num_workers=2)) == []  # nothing left of epoch 2
    ds.set_epoch(3)
    assert_same_batches(list(loader(ds, batch_size=8, num_workers=2)),
                        list(loader(_make(compiled, epoch=3)(), batch_size=8, num_workers=2)))


def test_batches_state_fits_every_rank(compiled):
    """state_dict(batches=..., loader=...) holds no per-rank positions, so rank 0's save resumes rank 1 too."""
    r0 = _make(compiled, rank=0, world_size=2)
    r1 = _make(compiled, rank=1, world_size=2)
    _, state = save_after(r0, 3, batch_size=4, num_workers=2)
    full = list(loader(r1(), batch_size=4, num_workers=2))
    ds = r1()
    ds.load_state_dict(state)
    assert_same_batches(full[:3] + list(loader(ds, batch_size=4, num_workers=2)), full)


def test_state_refuses_another_stream(compiled):
    _, state = save_after(_make(compiled), 2, batch_size=4, num_workers=0)
    other = CompiledDataset(str(compiled), delta_timestamps=WINDOWS, episode_pool_size=4, seed=5)
    with pytest.raises(ValueError, match="episode_pool_size"):
        other.load_state_dict(state)
    # Another worker count, refused where the state is applied (in-process here: a DataLoader whose worker
    # raised takes torch 2 x 5 s to shut down, for the same check)
    _, state = save_after(_make(compiled), 2, batch_size=4, num_workers=2)
    ds = _make(compiled)()
    ds.load_state_dict(json.loads(json.dumps(state)))
    with pytest.raises(ValueError, match="num_workers=2.*num_workers=1"):
        list(ds)


def test_resume_twice_counting_batches_since_the_epoch_began(compiled):
    """After a resume, ``batches`` keeps counting from the start of the epoch; a second resume is exact too."""
    make = _make(compiled, epoch=1)
    full = list(loader(make(), batch_size=5, num_workers=2))
    first, state = save_after(make, 3, batch_size=5, num_workers=2)
    ds = make()
    ds.load_state_dict(state)
    dl = loader(ds, batch_size=5, num_workers=2)
    it = iter(dl)
    middle = [next(it) for _ in range(4)]
    state = ds.state_dict(batches=3 + 4, loader=dl)
    del it
    again = make()
    again.load_state_dict(state)
    assert_same_batches(first + middle + list(loader(again, batch_size=5, num_workers=2)), full)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torchdata_stateful_dataloader(compiled, num_workers):
    """torchdata's StatefulDataLoader saves each worker's ``state_dict()`` itself: resume is exact with it too."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    make = _make(compiled, epoch=1)
    full = list(stateful.StatefulDataLoader(make(), batch_size=7, num_workers=num_workers))
    for k in (1, 9):
        dl = stateful.StatefulDataLoader(make(), batch_size=7, num_workers=num_workers)
        it = iter(dl)
        first = [next(it) for _ in range(k)]
        state = dl.state_dict()
        del it
        dl = stateful.StatefulDataLoader(make(), batch_size=7, num_workers=num_workers)
        dl.load_state_dict(state)
        assert_same_batches(first + list(dl), full)
