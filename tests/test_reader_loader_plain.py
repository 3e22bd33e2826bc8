"""``roboreel.loader`` (decode in the main process) against the plain DataLoader path, on the CPU: batches bit for
bit, uint8 and transforms, resume, persistent workers, argument checks and clean shutdown."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time

import pytest
import torch
from support.datasets import codes, compiled_pair
from support.loading import CAMERAS, make_dataset, plain, routed_clips
from support.resume import assert_same_batches
from torch.utils.data import DataLoader

import roboreel
from roboreel.reader import CompiledDataset, DeviceLoader

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes, 2 cameras), 2 episodes per shard."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_batches_equal_the_dataloader_batches(compiled, num_workers):
    make = make_dataset(compiled, epoch=1)
    want = plain(make, batch_size=5, num_workers=num_workers)
    dl = roboreel.loader(make(), mix_workers=False, batch_size=5, num_workers=num_workers)
    cpu = time.process_time()
    got = list(dl)
    cpu = time.process_time() - cpu  # every thread of this process: the decode threads' share is part of it
    assert len(dl) == len(want)
    assert_same_batches(got, want)  # same keys in order, dtypes, shapes, values (bit for bit on the CPU)
    b = got[0]
    assert b["observation.images.top"].shape[:2] == (5, 3) and b["observation.images.wrist"].dim() == 4
    assert b["observation.images.top"].dtype == torch.float32 and b["observation.images.top_is_pad"].shape == (5, 3)
    assert isinstance(b["task"], list) and isinstance(b["task"][0], str)
    assert [codes(x) for x in b["observation.images.top"]] == [codes(x) for x in want[0]["observation.images.top"]]
    st = dl.stats()
    assert st["batches"] == len(want) and st["samples"] == sum(len(x["index"]) for x in want)
    k = max(1, num_workers)  # clips of an episode the split cut between two workers are decoded by both
    clips = routed_clips(make(), num_workers, 1)
    assert clips in (16, 16 + len(CAMERAS) * (k - 1)) if k > 1 else clips == 16
    assert st["decoder_opens"] > 0 and st["fallback_clips"] == 0 and st["clips_by_device"] == {"cpu": clips}
    # a batch asks for the clips of its worker's pooled episodes (3) x 2 cameras at most; the decode threads work
    # on those of the batches in flight (inflight_batches, plus the one just submitted)
    assert 0 < st["decode_cpu_seconds"] <= cpu + 0.01
    par, most = st["decode_parallelism"], 3 * len(CAMERAS)
    assert 2 <= par["clips_per_batch"] <= most and 0 <= par["clips_in_flight"] <= (dl.inflight_batches + 1) * most


def test_loader_uint8_and_transforms_equal_the_dataloader(compiled):
    def flip(x):
        return x.flip(-1)

    make = make_dataset(compiled, return_uint8=True, image_transforms=flip)
    want = plain(make, batch_size=4, num_workers=0, drop_last=True)
    got = list(DeviceLoader(make(), batch_size=4, drop_last=True, prefetch_batches=1))
    assert_same_batches(got, want)
    assert got[0]["observation.images.wrist"].dtype == torch.uint8


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_resume_equals_an_uninterrupted_run(compiled, num_workers):
    make = make_dataset(compiled, epoch=1)
    full = list(roboreel.loader(make(), mix_workers=False, batch_size=6, num_workers=num_workers))
    for k in (1, 4):
        dl = roboreel.loader(make(), mix_workers=False, batch_size=6, num_workers=num_workers, prefetch_batches=3)
        it = iter(dl)
        first = [next(it) for _ in range(k)]
        state = json.loads(json.dumps(dl.state_dict()))  # what a trainer saves, through JSON
        assert state["batches"] == k and state["epoch"] == 1
        del it  # abandon the epoch (the decode thread had batches ready: they must not be skipped)
        dl2 = roboreel.loader(make(), mix_workers=False, batch_size=6, num_workers=num_workers)
        dl2.load_state_dict(state)
        rest = list(dl2)
        assert_same_batches(first + rest, full)
        assert dl2.state_dict()["batches"] == len(full)


def test_loader_with_persistent_workers_follows_the_dataloader_across_epochs(compiled):
    """Abandon an epoch after one batch, then read the next: the persistent workers' iterator is reused, so the
    old decode thread must have let go of it (it would steal the new epoch's first batch otherwise)."""
    make = make_dataset(compiled)
    plain = DataLoader(make(), batch_size=6, num_workers=2, persistent_workers=True)
    want_first = next(iter(plain))
    want_next = list(plain)
    dl = roboreel.loader(make(), mix_workers=False, batch_size=6, num_workers=2, persistent_workers=True)
    got_first = next(iter(dl))
    got_next = list(dl)
    assert_same_batches([got_first] + got_next, [want_first] + want_next)


def test_loader_arguments_are_checked(compiled):
    ds = CompiledDataset(str(compiled))
    with pytest.raises(ValueError, match=r"roboreel.loader does not take \['collate_fn'\]"):
        roboreel.loader(ds, batch_size=4, collate_fn=list)
    with pytest.raises(ValueError, match="in_order must be True"):
        roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=2, in_order=False)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        roboreel.loader(ds, batch_size=0)
    with pytest.raises(ValueError, match="prefetch_batches must be an integer >= 1"):
        roboreel.loader(ds, batch_size=2, prefetch_batches=0)
    with pytest.raises(ValueError, match=r"must be a roboreel CompiledDataset \(one or a mixture\), got list"):
        roboreel.loader([], batch_size=2)
    with pytest.raises(ValueError, match="has no 'batches'"):
        roboreel.loader(ds, batch_size=2).load_state_dict(ds.state_dict())


def test_an_abandoned_loader_stops_its_thread_and_workers(compiled):
    before = {p.pid for p in multiprocessing.active_children()}
    dl = roboreel.loader(make_dataset(compiled)(), mix_workers=False, batch_size=4, num_workers=2)
    it = iter(dl)
    next(it)
    again = iter(dl)  # a new epoch closes the live one first
    next(again)
    dl.close()
    alive = [t for t in threading.enumerate() if t.name == "roboreel-decode" and t.is_alive()]
    assert alive == []
    assert [p for p in multiprocessing.active_children() if p.pid not in before and p.is_alive()] == []


def test_bench_reads_through_the_loader_when_asked(compiled, tmp_path):
    from roboreel.bench.config import RunConfig
    from roboreel.bench.runner import run_one

    cfg = RunConfig(batch_size=4, num_workers=2, batches=3, warmup_batches=1, device_loader=True)
    res = run_one("compiled", "single", compiled=str(compiled), source=str(compiled), cfg=cfg)
    assert res["decode_stage"] == "main-process" and res["samples"] == 12 and res["fallback_clips"] == 0
    assert res["latency_p50_ms"] > 0 and res["decoder_opens"] > 0
    assert res["gpu_max_allocated_mb"] is None  # CPU run: no GPU memory to report
