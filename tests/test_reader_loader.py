"""``roboreel.loader``'s decode pool (reader/decode/_stage.py): threads in the training process decode into preallocated
batch tensors, and the batches equal ``DataLoader(CompiledDataset(...))``'s exactly: order, values (frames
identified by pixel codes, every tensor compared bit for bit), uint8 and float32, single frames and camera
windows, 0 and 2 workers, resume mid-epoch.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import threading
from typing import Any

import numpy as np
import pytest
import torch
from support.datasets import codes, compiled_pair
from support.resume import assert_same_batches
from torch.utils.data import DataLoader

import roboreel
from roboreel.formats.errors import CompiledFormatError
from roboreel.reader import CompiledDataset
from roboreel.reader.decode._deferred import collate_pending
from roboreel.reader.decode._gpu import DeviceDecoders
from roboreel.reader.decode._heap import DECODE_CALL_BYTES
from roboreel.reader.decode._layout import BatchLayout
from roboreel.reader.decode._routing import Router
from roboreel.reader.decode._runs import RunBudget
from roboreel.reader.decode._stage import DecodePool, default_decode_threads
from roboreel.reader.loader._loader import DeviceLoader, _PendingStream
from roboreel.reader.loader._stage import finish_batch

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")
CAMERAS = ["observation.images.top", "observation.images.wrist"]
WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.1, -0.05, 0.0],
           "observation.images.wrist": [0.0, 0.05]}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes of 12-30 frames, 2 cameras), 2 episodes per shard."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


def _make(path, *, epoch=1, **kw):
    def make():
        ds = CompiledDataset(str(path), episode_pool_size=3, seed=7, **kw)
        ds.set_epoch(epoch)
        return ds

    return make


def _assert_same_frames(got, want):
    """Beyond bit equality: the frames are the right ones (pixel codes: index, episode, camera)."""
    for g, w in zip(got, want, strict=True):
        for cam in CAMERAS:
            x = g[cam] if g[cam].dtype == torch.uint8 else (g[cam] * 255).round().to(torch.uint8)
            y = w[cam] if w[cam].dtype == torch.uint8 else (w[cam] * 255).round().to(torch.uint8)
            assert [codes(a) for a in x] == [codes(b) for b in y]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
@pytest.mark.parametrize("windows", [None, WINDOWS], ids=["single", "windows"])
def test_pool_batches_equal_the_dataloader_batches(compiled, num_workers, uint8, windows):
    make = _make(compiled, return_uint8=uint8, delta_timestamps=windows)
    want = list(DataLoader(make(), batch_size=5, num_workers=num_workers))
    got = list(roboreel.loader(make(), mix_workers=False, batch_size=5, num_workers=num_workers, decode_threads=3, inflight_batches=3))
    assert_same_batches(got, want)
    _assert_same_frames(got, want)
    top = got[0]["observation.images.top"]
    assert top.dtype == (torch.uint8 if uint8 else torch.float32)
    assert top.shape == ((5, 3, 3, 64, 64) if windows else (5, 3, 64, 64))


@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
@pytest.mark.parametrize("windows", [None, WINDOWS], ids=["single", "windows"])
def test_channels_last_batches_hold_the_same_values_in_decoder_order(compiled, uint8, windows):
    """``channels_last=True``: same shapes, dtypes and values as the DataLoader's, channels-last memory (no
    transposing copy on the CPU)."""
    make = _make(compiled, return_uint8=uint8, delta_timestamps=windows)
    want = list(DataLoader(make(), batch_size=5))
    got = list(roboreel.loader(make(), batch_size=5, decode_threads=2, channels_last=True))
    assert_same_batches(got, want)
    _assert_same_frames(got, want)
    for batch in got:
        for cam in CAMERAS:
            x = batch[cam].flatten(0, 1) if windows else batch[cam]
            assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
def test_pool_resume_mid_epoch_equals_an_uninterrupted_dataloader_run(compiled, num_workers, uint8):
    make = _make(compiled, return_uint8=uint8, delta_timestamps=WINDOWS)
    plain = DataLoader(make(), batch_size=4, num_workers=num_workers)
    full = list(plain)
    k = 3
    dl = roboreel.loader(make(), mix_workers=False, batch_size=4, num_workers=num_workers, decode_threads=2, prefetch_batches=3)
    it = iter(dl)
    first = [next(it) for _ in range(k)]
    state = json.loads(json.dumps(dl.state_dict()))
    ds_state = make()
    assert state == {**ds_state.state_dict(batches=k, loader=plain), "stream": state["stream"]}  # the same state
    del it  # batches decoded ahead but not returned must not be skipped
    dl.close()
    dl2 = roboreel.loader(make(), mix_workers=False, batch_size=4, num_workers=num_workers, decode_threads=2)
    dl2.load_state_dict(state)
    rest = list(dl2)
    assert_same_batches(first + rest, full)
    _assert_same_frames(first + rest, full)
    # and the plain DataLoader resumes from the loader's state to the same batches
    ds = make()
    ds.load_state_dict(state)
    assert_same_batches(list(DataLoader(ds, batch_size=4, num_workers=num_workers)), rest)


@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
def test_batch_buffers_are_reused_only_once_the_loop_let_go(compiled, uint8):
    """Batch arrays come back once no tensor refers to them (reader/decode/_buffers.py): a loop that drops each batch gets
    reused arrays, and batches it keeps are never written again, across two epochs."""
    make = _make(compiled, return_uint8=uint8, delta_timestamps=WINDOWS)
    ds = make()
    dl = roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=0, decode_threads=2)
    for epoch in (1, 2):
        ds.set_epoch(epoch)
        ref = make()
        ref.set_epoch(epoch)
        want = list(DataLoader(ref, batch_size=4))
        kept, copies = [], []
        for i, batch in enumerate(dl):
            assert_same_batches([batch], [want[i]])
            if i % 3 == 0:  # keep every third batch, as a loop holding some batches (or views of them) would
                kept.append(batch["observation.images.top"][1:])
                copies.append(kept[-1].clone())
        for k, c in zip(kept, copies, strict=True):
            assert torch.equal(k, c)  # a held batch was never handed out again
    assert dl._buffers.reused > 0



def test_every_camera_gets_its_batch_arrays_back_in_steady_state(compiled):
    """Cameras of one size share the pool's arrays: a loop that drops each batch allocates only what is in flight
    at once and keeps it, every other camera tensor is a reused array, over two epochs with workers."""
    ds = _make(compiled, return_uint8=True)()
    cameras = len(ds.camera_keys)
    assert cameras > 1
    dl = roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=2, prefetch_batches=1)
    taken = 0
    for epoch in (1, 2):
        dl.set_epoch(epoch)
        for batch in dl:
            taken += sum(1 for k in ds.camera_keys if k in batch)
    dl.close()
    kept = sum(len(a) for a in dl._buffers._arrays.values())  # one list per shape (the last batch is smaller)
    fresh = taken - dl._buffers.reused
    assert fresh == kept  # every array allocated stayed in the pool: none dropped because all were in use

@pytest.mark.parametrize("order", ["segments", "shuffled"])
def test_each_clip_is_opened_once_per_lane_and_released(compiled, order):
    """Decoders are reused per clip and lane across batches: a clip's lane is opened exactly once per worker
    stream, however many batches read it, and closed when its episode leaves the pool. ``segments`` reads a clip
    on lane 0 only; the default order opens one lane per GOP run it keeps open (the plan names them)."""
    lanes = {(p.episode, cam, int(req.lanes[0]) if req.lanes is not None else 0)
             for p in _make(compiled, frame_order=order)().iter_pending() for cam, req in p.video.items()}
    dl = roboreel.loader(_make(compiled, frame_order=order)(), batch_size=3, decode_threads=4, inflight_batches=4)
    batches = list(dl)
    clips = {(int(e), cam) for b in batches for e in b["episode_index"] for cam in CAMERAS}
    st = dl.stats()
    assert len(clips) == 8 * len(CAMERAS) and {(e, c) for e, c, _ in lanes} == clips
    assert st["decoder_opens"] == len(lanes)
    assert (len(lanes) == len(clips)) == (order == "segments")
    assert st["frames_decoded"] == st["samples"] * len(CAMERAS)  # every frame decoded once
    assert st["decode_calls"] < st["frames_decoded"]  # the run cache: a run's frames decode in one call
    if order == "segments":  # lane 0 takes one run after another
        assert st["decoder_reuses"] > 0


def _decode_epoch(ds, budget: RunBudget, *, max_call_bytes: int, threads: int = 2) -> tuple[list, Any, int]:
    """One epoch of pending batches through a DecodePool whose clips share ``budget``: the uint8 camera tensors of
    every batch, the pool's counters, and the most the budget held after any batch was submitted."""
    cameras = {c.key: c for c in ds.manifest.cameras}
    router = Router("cpu", cameras=cameras)
    pool = DecodePool(threads=threads, layout=BatchLayout(cameras, {c: torch.device("cpu") for c in cameras}),
                      make_decoders=lambda: DeviceDecoders(router, max_call_bytes=max_call_bytes, run_budget=budget),
                      tolerance_s=ds.decode_options.tolerance_s)
    out, peak = [], 0
    try:
        for pb in DataLoader(_PendingStream(ds), batch_size=4, collate_fn=collate_pending):
            job = pool.submit(pb)
            job.wait()
            peak = max(peak, budget.used)
            out.append({cam: t.clone() for cam, t in job.frames.items()})
    finally:
        pool.close()
    return out, pool.stats, peak  # after close: every decoder's counters, the released ones' too


def test_the_stage_decodes_gop_runs_whole_within_one_shared_budget(compiled):
    """The decode stage takes a GOP run's frames from one decode of the run (its first batch asks the first frame)
    instead of a few frames per batch: far fewer calls, each frame decoded once. One budget bounds every clip's runs
    together (a tight one decodes shorter runs, never holds more); calls capped in size split a run; the frames are
    those decoded frame by frame (budget 0) in every case, and a closed pool gives all its bytes back."""
    frame = 3 * 64 * 64
    results = {}
    for name, budget, cap in (("none", 0, 0), ("ample", 64 << 20, 0), ("tight", 6 * frame, 0),
                              ("split", 64 << 20, 3 * frame)):
        shared = RunBudget(budget)
        ds = _make(compiled, frame_order="segments")()  # the order that promises runs
        batches, stats, peak = _decode_epoch(ds, shared, max_call_bytes=cap)
        assert 0 < peak <= budget or peak == budget == 0
        assert shared.used == 0  # every run dropped: released or closed with its clip
        assert stats.frames_decoded == sum(b[c].shape[0] for b in batches for c in CAMERAS)  # once each
        results[name] = (batches, stats.decode_calls)
    calls = {k: v[1] for k, v in results.items()}
    assert calls["ample"] < calls["tight"] < calls["none"] and calls["ample"] < calls["split"] < calls["none"]
    for name, (batches, _) in results.items():
        for got, want in zip(batches, results["none"][0], strict=True):
            assert all(torch.equal(got[c], want[c]) for c in CAMERAS), name


@pytest.mark.parametrize("max_call_bytes", [0, DECODE_CALL_BYTES], ids=["one-call", "loader-calls"])
def test_a_bad_clip_fails_its_batch_naming_the_clip(compiled, max_call_bytes):
    ds = _make(compiled)()
    pbs = list(DataLoader(_PendingStream(ds), batch_size=4, collate_fn=collate_pending))
    key = next(iter(pbs[0].wanted))
    clip = pbs[0].clips[key]
    pbs[0].clips[key] = dataclasses.replace(clip, data=clip.data[:200])  # truncated mp4
    cameras = {c.key: c for c in ds.manifest.cameras}
    router = Router("cpu", cameras=cameras)
    pool = DecodePool(threads=2, make_decoders=lambda: DeviceDecoders(router, max_call_bytes=max_call_bytes),
                      layout=BatchLayout(cameras, {c: torch.device("cpu") for c in cameras}),
                      tolerance_s=ds.decode_options.tolerance_s)
    try:
        job = pool.submit(pbs[0])
        with pytest.raises(CompiledFormatError, match=rf"{clip.shard}.*episode {clip.episode}|{clip.name}"):
            job.wait()
    finally:
        pool.close()


def test_decode_threads_are_checked(compiled):
    assert default_decode_threads() >= 1
    ds = CompiledDataset(str(compiled))
    with pytest.raises(ValueError, match="decode_threads must be an integer >= 1, got 0"):
        roboreel.loader(ds, batch_size=2, decode_threads=0)
    with pytest.raises(ValueError, match="inflight_batches must be an integer >= 1, got 0"):
        roboreel.loader(ds, batch_size=2, inflight_batches=0)
    # batches in flight follow the threads (half as many, 2 to 8), unless given
    got = {t: roboreel.loader(ds, batch_size=2, decode_threads=t).inflight_batches for t in (1, 2, 4, 6, 16, 64)}
    assert got == {1: 2, 2: 2, 4: 2, 6: 3, 16: 8, 64: 8}
    assert roboreel.loader(ds, batch_size=2, decode_threads=16, inflight_batches=3).inflight_batches == 3


def test_loader_names_the_device_loader_knobs_and_passes_the_rest_on(compiled):
    """device, inflight_batches and max_gpu_decoders are loader()'s own keywords, with DeviceLoader's defaults;
    anything else (mix_workers, DataLoader options) still reaches DeviceLoader."""
    own, full = inspect.signature(roboreel.loader).parameters, inspect.signature(DeviceLoader).parameters
    for name in ("device", "inflight_batches", "max_gpu_decoders"):
        assert own[name].kind is inspect.Parameter.KEYWORD_ONLY and own[name].default == full[name].default
    dl = roboreel.loader(CompiledDataset(str(compiled)), batch_size=4, num_workers=2, device="cpu",
                         inflight_batches=3, max_gpu_decoders=5, mix_workers=False, persistent_workers=False)
    assert (dl.device, dl.inflight_batches, dl.max_gpu_decoders, dl.mix) == (torch.device("cpu"), 3, 5, 1)
    assert dl.dataloader.persistent_workers is False and dl.dataloader.batch_size == 4


@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
def test_channels_last_staging_gives_the_same_contiguous_batches(compiled, uint8):
    """What the pool does when the batch goes to CUDA (frames staged [N, H, W, C], transposed where they land),
    run on the CPU: same batches as the DataLoader, contiguous [B, (T,) C, H, W]."""
    make = _make(compiled, return_uint8=uint8, delta_timestamps=WINDOWS)
    want = list(DataLoader(make(), batch_size=5))
    ds = make()
    cameras = {c.key: c for c in ds.manifest.cameras}
    router = Router("cpu", cameras=cameras)
    pool = DecodePool(threads=2, make_decoders=lambda: DeviceDecoders(router, keep=ds.keep_frames),
                      layout=BatchLayout(cameras, {c: torch.device("cpu") for c in cameras}, channels_last=True),
                      tolerance_s=ds.decode_options.tolerance_s)
    got = []
    try:
        for pb in DataLoader(_PendingStream(ds), batch_size=5, collate_fn=collate_pending):
            job = pool.submit(pb)
            assert job.frames[CAMERAS[0]].shape[1:] == (64, 64, 3)
            job.wait()
            got.append(finish_batch(job, device=torch.device("cpu"), return_uint8=uint8, image_transforms=None))
    finally:
        pool.close()
    assert_same_batches(got, want)
    _assert_same_frames(got, want)
    assert all(b[c].is_contiguous() for b in got for c in CAMERAS)


def test_device_defaults_to_the_decode_device(compiled):
    make = _make(compiled, return_uint8=True)
    want = list(roboreel.loader(make(), batch_size=4))
    assert_same_batches(list(roboreel.loader(make(), batch_size=4, device="cpu")), want)


def test_closing_with_chained_tasks_queued_returns(compiled):
    """Closing while a clip's later tasks wait behind queued ones must not deadlock (it did with
    ``shutdown(cancel_futures=True)``: cancelling ran the chain's callbacks under the executor's lock)."""
    ds = _make(compiled)()
    pbs = list(DataLoader(_PendingStream(ds), batch_size=3, collate_fn=collate_pending))
    cameras = {c.key: c for c in ds.manifest.cameras}
    router = Router("cpu", cameras=cameras)
    pool = DecodePool(threads=1, make_decoders=lambda: DeviceDecoders(router),
                      layout=BatchLayout(cameras, {c: torch.device("cpu") for c in cameras}),
                      tolerance_s=ds.decode_options.tolerance_s)
    gate = threading.Event()
    pool._executor.submit(gate.wait)  # hold the only thread, so every task below queues (chained per clip)
    for pb in pbs[:4]:
        pool.submit(pb)
    closer = threading.Thread(target=pool.close, daemon=True)
    closer.start()
    closer.join(0.5)  # close is now waiting for the held thread, with the queue full
    gate.set()
    closer.join(60)
    assert not closer.is_alive()


def test_dropping_a_loader_with_persistent_workers_stops_them_at_once(compiled):
    """No reference cycle holds a loader: dropping it frees it by reference counting, which shuts its persistent
    workers down in order. (Inside a cycle the garbage collector would run multiprocessing's queue finalizers
    first, the workers would never get their stop signal, and torch would wait 5 s for each.)"""
    import gc
    import weakref

    ds = _make(compiled)()
    dl = roboreel.loader(ds, mix_workers=False, batch_size=4, num_workers=2, persistent_workers=True, decode_threads=2)
    for epoch in (1, 2):
        ds.set_epoch(epoch)
        assert sum(b["index"].numel() for b in dl) == len(ds)
    workers = list(dl.dataloader._iterator._workers)
    assert workers and all(w.is_alive() for w in workers)
    gc.collect()
    gc.disable()
    try:
        ref = weakref.ref(dl)
        del dl
        assert ref() is None
        assert not any(w.is_alive() for w in workers)
    finally:
        gc.enable()


def test_copy_frame_deinterleaves_exactly(compiled):
    """The stage's frame copies (OpenCV's split into the three planes of a [C, H, W] slot, numpy otherwise) write
    exactly the decoded frame, or its ``x / 255.0`` into float32 slots, for real decoded frames and for layouts
    they must leave to numpy."""
    from roboreel.reader.decode._pixels import copy_frame

    ds = _make(compiled)()
    clip = next(p for p in DataLoader(_PendingStream(ds), batch_size=4, collate_fn=collate_pending)).clips
    data = next(c for c in clip.values() if c.data).data
    from torchcodec.decoders import VideoDecoder

    frames = VideoDecoder(data).get_frames_at([0, 1, 2]).data  # [N, C, H, W] views of channels-last memory
    slots = np.zeros((3, *frames.shape[1:]), np.uint8)
    for i in range(3):
        copy_frame(frames[i].numpy(), slots[i])
    assert np.array_equal(slots, frames.numpy())
    contiguous = frames.contiguous().numpy()  # already [C, H, W] memory: plain copy
    out = np.zeros_like(contiguous[0])
    copy_frame(contiguous[1], out)
    assert np.array_equal(out, contiguous[1])
    hwc = frames[2].permute(1, 2, 0).numpy()  # [H, W, C] into [H, W, C] (channels-last staging)
    out = np.zeros_like(hwc)
    copy_frame(hwc, out)
    assert np.array_equal(out, hwc)
    # float32 slots: the bits of torch's x / 255.0, from the strided view (through the thread's scratch) and from
    # contiguous memory, also after the scratch's shape changed
    from roboreel.reader.decode._pixels import unit_frame

    want = (frames.contiguous() / 255.0).numpy()
    got = np.full((3, *frames.shape[1:]), np.nan, np.float32)
    for i in range(3):
        unit_frame(frames[i].numpy(), got[i])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    small = frames[0, :, :8, :8]  # a strided view of another shape
    out = np.empty(small.shape, np.float32)
    unit_frame(small.numpy(), out)
    assert np.array_equal(out.view(np.uint32), (small.contiguous() / 255.0).numpy().view(np.uint32))
    out = np.empty(contiguous[1].shape, np.float32)
    unit_frame(contiguous[1], out)
    assert np.array_equal(out.view(np.uint32), want[1].view(np.uint32))
