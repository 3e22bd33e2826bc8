"""GPU decode for CompiledDataset: device checks, per-clip routing and fallback, the ship-once deferred stream,
and ``roboreel.loader`` (decode in the main process) against the plain DataLoader path.

On a machine without CUDA everything but the ``needs_cuda`` tests runs: the loader decodes on the CPU and must
give the plain DataLoader's batches bit for bit; the fallback path is driven by torchcodec's real "Unsupported
device" error. The ``needs_cuda`` tests run the same comparisons on a GPU (run them there, see docs/gpu.md).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import threading
import time

import pytest
import torch
import torchcodec
from support.datasets import codes, compiled_pair
from support.resume import assert_same_batches
from torch.utils.data import DataLoader

import roboreel
from roboreel.reader import CompiledDataset, DecodeOptions, DeviceLoader
from roboreel.reader.decode.deferred import ClipStore, assemble, collate_pending
from roboreel.reader.decode.gpu import DeviceDecoders
from roboreel.reader.decode.routing import Router, choose_device, parse_decode_device, resolve_decode_device
from roboreel.reader.decode.runs import RunBudget
from roboreel.reader.loader._loader import _PendingStream
from roboreel.reader.plan.epoch import World
from roboreel.reader.plan.requests import EpisodeClip

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")
HAVE_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and a CUDA build of torchcodec")
no_cuda = pytest.mark.skipif(HAVE_CUDA, reason="checks the no-CUDA behaviour")
TORCHCODEC_CPU_BUILD = torchcodec.__version__.endswith("+cpu")
CAMERAS = ["observation.images.top", "observation.images.wrist"]
WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.05, 0.0, 0.1]}
ROUTING_LOG = "roboreel.reader.decode.routing"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes, 2 cameras), 2 episodes per shard: below every NVDEC minimum."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """160x160 frames: above NVDEC's HEVC minimum (144x144), so a GPU is asked to decode them."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2, episodes=3, min_length=8, max_length=12,
                         height=160, width=160)[1]


def _make(path, *, epoch=0, device="cpu", **kw):
    def make():
        ds = CompiledDataset(str(path), delta_timestamps=WINDOWS, episode_pool_size=3, seed=5,
                             decode=DecodeOptions(device=device), **kw)
        ds.set_epoch(epoch)
        return ds

    return make


def _plain(make, **kw):
    return list(DataLoader(make(), **kw))


def _routed_clips(ds, num_workers, epoch):
    """Clips the loader routes in one epoch: a clip whose episode the worker split cut in two is routed (and
    decoded) once in each worker that reads part of it."""
    k = max(1, num_workers)
    return sum(len(s.episodes) for w in range(k) for s in ds._slices(World(0, 1, w, k), epoch)) * len(CAMERAS)


def _on_cpu(batch):
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


# -- devices -----------------------------------------------------------------------------------------------
def test_decode_device_spelling_is_checked():
    assert [parse_decode_device(d) for d in ("cpu", "cuda", "cuda:1", torch.device("cuda", 2))] == [
        "cpu", "cuda", "cuda:1", "cuda:2"]
    for bad in ("tpu", "gpu", "cuda:x", "cuda:", "CPU"):
        with pytest.raises(ValueError, match=r"decode_device must be 'cpu', 'cuda' or 'cuda:N'"):
            parse_decode_device(bad)
    with pytest.raises(ValueError, match=r"decode_fallback must be one of \('error', 'cpu'\), got 'warn'"):
        resolve_decode_device("cuda", fallback="warn")


@no_cuda
def test_cuda_without_a_device_raises_unless_falling_back_to_cpu(compiled, caplog):
    with pytest.raises(RuntimeError, match=r"no CUDA device: torch.cuda.is_available\(\) is False"):
        CompiledDataset(str(compiled), decode=DecodeOptions(device="cuda"))
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        ds = CompiledDataset(str(compiled), decode=DecodeOptions(device="cuda:0", fallback="cpu"))
    assert ds.decode_device == "cpu"
    assert [r.getMessage() for r in caplog.records if r.name == ROUTING_LOG] == [
        "DecodeOptions(device='cuda:0'): no CUDA device (torch.cuda.is_available() is False (torch "
        f"{torch.__version__} is a CPU build)); decoding on the CPU (fallback='cpu')"]
    assert len(list(ds)) == ds.manifest.total_frames  # and it reads


# -- routing -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("codec", "size", "cap", "tc", "device", "kind", "why"), [
    ("hevc", 64, (9, 0), True, "cpu", "nvdec-table", "64x64 is below NVDEC's hevc minimum 144x144"),
    ("hevc", 224, (9, 0), True, "cuda:0", None, "hevc 224x224 is within NVDEC's limits"),
    ("av1", 224, (9, 0), True, "cpu", "nvdec-table", "Hopper (H100/H200) has no AV1 NVDEC"),
    ("av1", 224, (8, 9), True, "cuda:0", None, "within NVDEC's limits"),
    ("av1", 224, None, True, "cpu", "nvdec-table", "compute capability unknown"),
    ("vp9", 224, (9, 0), True, "cpu", "nvdec-table", "codec 'vp9' is not in roboreel's NVDEC table"),
    ("hevc", 224, (9, 0), False, "cpu", "torchcodec-no-cuda", "a CPU build"),
])
def test_choose_device(codec, size, cap, tc, device, kind, why):
    got = choose_device("cuda:0", codec=codec, height=size, width=size, capability=cap,
                        torchcodec_cuda=(tc, "torchcodec 0.13.0+cpu is a CPU build"))
    assert got[:2] == (device, kind) and why in got[2], got
    assert choose_device("cpu", codec=codec, height=size, width=size, capability=cap,
                         torchcodec_cuda=(tc, ""))[:2] == ("cpu", None)


def test_router_sends_small_clips_to_the_cpu_warning_once_per_camera(compiled, caplog):
    ds = CompiledDataset(str(compiled))
    router = Router("cuda:0", cameras={c.key: c for c in ds.manifest.cameras}, capability=(9, 0),
                    torchcodec_cuda=(True, "a CUDA build"))
    keys = [(s.path, e, cam) for s in ds.manifest.shards for e in s.episodes for cam in CAMERAS]
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        for _ in range(3):  # a clip is routed (and counted) once, however many batches read it
            assert {router.device_for(k, k[2]) for k in keys} == {"cpu"}
    assert router.fallbacks == {"nvdec-table": len(keys)} and router.clips == {"cpu": len(keys)}
    msgs = [r.getMessage() for r in caplog.records if r.name == ROUTING_LOG]
    assert len(msgs) == len(CAMERAS)
    assert all("64x64 is below NVDEC's hevc minimum 144x144" in m and "instead of cuda:0" in m for m in msgs)
    router.release(keys[0])
    router.device_for(keys[0], keys[0][2])  # a released clip that comes back is counted again
    assert router.fallback_clips == len(keys) + 1


@pytest.mark.skipif(not TORCHCODEC_CPU_BUILD, reason="needs a torchcodec that cannot decode on CUDA")
def test_a_failing_gpu_decode_falls_back_to_the_cpu_and_stops_trying(large, caplog):
    """Drive the real failure: this torchcodec cannot open a CUDA decoder ("Unsupported device")."""
    ds = CompiledDataset(str(large))
    router = Router("cuda:0", cameras={c.key: c for c in ds.manifest.cameras}, capability=(8, 6),
                    torchcodec_cuda=(True, "assumed"))
    decoders, store = DeviceDecoders(router), ClipStore()
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        got = [assemble(pb, decoders, store, device="cpu", tolerance_s=1e-4)
               for pb in DataLoader(_PendingStream(ds), batch_size=4, collate_fn=collate_pending)]
    assert_same_batches(got, list(DataLoader(CompiledDataset(str(large)), batch_size=4)))
    msgs = [r.getMessage() for r in caplog.records if r.name == ROUTING_LOG]
    assert len(msgs) == 1 and "every camera: decoding on the CPU instead of cuda:0" in msgs[0], msgs
    assert "Unsupported device" in msgs[0]
    n = len(ds.manifest.episodes) * len(CAMERAS)
    assert router.fallbacks == {"torchcodec-no-cuda": n} and router.clips == {"cpu": n}
    assert decoders.gpu is not None and decoders.gpu.stats.decoder_opens == 0  # one failed open, then no tries
    assert len(store) == 0  # every clip released at its episode's end


# -- the deferred stream -----------------------------------------------------------------------------------
@pytest.mark.parametrize("num_workers", [0, 2])
def test_each_clip_is_shipped_once(compiled, num_workers):
    ds = _make(compiled)()
    shipped: list[tuple] = []
    released: list[tuple] = []
    for pb in DataLoader(_PendingStream(ds), batch_size=5, num_workers=num_workers, collate_fn=collate_pending):
        shipped += [k for k, c in pb.clips.items() if c.data]
        assert not set(pb.release) & set(released)
        released += pb.release
    # each worker's copy of each clip (a clip whose episode the split cut between workers has one per worker)
    every = {(ds.manifest.shards[s.shard].path, e, cam, w) for w in range(max(1, num_workers))
             for s in ds._slices(World(0, 1, w, max(1, num_workers)), 0) for e in s.episodes for cam in CAMERAS}
    assert {k[:3] for k in every} == {(s.path, e, cam) for s in ds.manifest.shards for e in s.episodes
                                      for cam in CAMERAS}
    assert sorted(shipped) == sorted(every)  # each clip's bytes exactly once per worker that reads it
    assert sorted(released) == sorted(every)  # and each released once


def test_a_clip_without_its_bytes_is_refused():
    with pytest.raises(RuntimeError, match=r"s:000003.cam.mp4 arrived without its bytes.*in_order=True"):
        ClipStore().admit({("s", 3, "cam", 0): EpisodeClip("s", 3, "cam", b"")})


# -- the loader against the plain DataLoader ---------------------------------------------------------------
@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_batches_equal_the_dataloader_batches(compiled, num_workers):
    make = _make(compiled, epoch=1)
    want = _plain(make, batch_size=5, num_workers=num_workers)
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
    clips = _routed_clips(make(), num_workers, 1)
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

    make = _make(compiled, return_uint8=True, image_transforms=flip)
    want = _plain(make, batch_size=4, num_workers=0, drop_last=True)
    got = list(DeviceLoader(make(), batch_size=4, drop_last=True, prefetch_batches=1))
    assert_same_batches(got, want)
    assert got[0]["observation.images.wrist"].dtype == torch.uint8


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_resume_equals_an_uninterrupted_run(compiled, num_workers):
    make = _make(compiled, epoch=1)
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
    make = _make(compiled)
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
    dl = roboreel.loader(_make(compiled)(), mix_workers=False, batch_size=4, num_workers=2)
    it = iter(dl)
    next(it)
    again = iter(dl)  # a new epoch closes the live one first
    next(again)
    dl.close()
    alive = [t for t in threading.enumerate() if t.name == "roboreel-decode" and t.is_alive()]
    assert alive == []
    assert [p for p in multiprocessing.active_children() if p.pid not in before and p.is_alive()] == []


def test_bench_reads_through_the_loader_when_asked(compiled, tmp_path):
    from roboreel.bench.runner import RunConfig, run_one

    cfg = RunConfig(batch_size=4, num_workers=2, batches=3, warmup_batches=1, device_loader=True)
    res = run_one("compiled", "single", compiled=str(compiled), source=str(compiled), cfg=cfg)
    assert res["decode_stage"] == "main-process" and res["samples"] == 12 and res["fallback_clips"] == 0
    assert res["latency_p50_ms"] > 0 and res["decoder_opens"] > 0
    assert res["gpu_max_allocated_mb"] is None  # CPU run: no GPU memory to report


# -- on a GPU ----------------------------------------------------------------------------------------------
@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_batches_match_the_cpu_batches(large):
    """NVDEC-sized clips: frames decoded on the GPU, same keys/dtypes/shapes, same frames (pixel codes), pixel
    values within codec tolerance (NVDEC + NPP colour conversion is not bit-exact with FFmpeg's swscale)."""
    want = list(roboreel.loader(_make(large)(), mix_workers=False, batch_size=4, num_workers=2))
    dl = roboreel.loader(_make(large, device="cuda")(), mix_workers=False, batch_size=4, num_workers=2, pin_memory=True)
    got = list(dl)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w)
        for k, v in w.items():
            if not isinstance(v, torch.Tensor):
                assert g[k] == v
                continue
            assert g[k].is_cuda and g[k].dtype == v.dtype and g[k].shape == v.shape, k
            if k in CAMERAS:
                gc = g[k].cpu()
                assert [codes(x) for x in gc] == [codes(x) for x in v]
                # torchcodec's own CUDA-vs-CPU tolerance (its test/utils.py assert_frames_equal): 2-3 of 255
                torch.testing.assert_close(gc, v, atol=3 / 255 + 1e-6, rtol=0)
            else:
                assert torch.equal(g[k].cpu(), v), k
    st = dl.stats()
    cap = torch.cuda.get_device_capability()
    if cap[0] >= 6:  # HEVC NVDEC from Pascal on
        assert st["fallback_clips"] == 0 and st["clips_by_device"].get("cpu", 0) == 0, st


@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_small_frames_fall_back_per_clip_with_one_warning_per_camera(compiled, caplog):
    want = list(roboreel.loader(_make(compiled)(), mix_workers=False, batch_size=5, num_workers=2))
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        dl = roboreel.loader(_make(compiled, device="cuda")(), mix_workers=False, batch_size=5, num_workers=2)
        got = [_on_cpu(b) for b in dl]
    assert_same_batches(got, want)  # decoded on the CPU, moved to the GPU: identical values
    msgs = [r.getMessage() for r in caplog.records if r.name == ROUTING_LOG]
    assert len(msgs) == len(CAMERAS) and all("below NVDEC's hevc minimum" in m for m in msgs)
    clips = _routed_clips(_make(compiled)(), 2, 0)  # 16, or 18 where the split cut an episode in two
    st = dl.stats()
    assert st["fallback_clips"] == clips and st["clips_by_device"] == {"cpu": clips}, st


@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_dataset_is_not_iterated_in_workers(compiled):
    ds = _make(compiled, device="cuda")()
    with pytest.raises(RuntimeError, match=r"read it with roboreel.loader"):
        next(iter(ds))
    with pytest.raises(RuntimeError, match=r"roboreel.loader"):
        next(iter(DataLoader(ds, batch_size=2, num_workers=2)))
    with pytest.raises(RuntimeError, match=r"no CUDA device: cuda:\d+ asked for"):
        CompiledDataset(str(compiled), decode=DecodeOptions(device=f"cuda:{torch.cuda.device_count()}"))


@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_resume_through_the_loader(large):
    make = _make(large, device="cuda", epoch=1)
    full = [_on_cpu(b) for b in roboreel.loader(make(), mix_workers=False, batch_size=3, num_workers=2)]
    dl = roboreel.loader(make(), mix_workers=False, batch_size=3, num_workers=2)
    it = iter(dl)
    first = [_on_cpu(next(it)) for _ in range(2)]
    state = dl.state_dict()
    del it
    dl2 = roboreel.loader(make(), mix_workers=False, batch_size=3, num_workers=2)
    dl2.load_state_dict(state)
    rest = [_on_cpu(b) for b in dl2]
    assert [int(i) for b in first + rest for i in b["index"]] == [int(i) for b in full for i in b["index"]]


@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_bench_reports_gpu_memory(large):
    from roboreel.bench.runner import RunConfig, run_one

    cfg = RunConfig(batch_size=4, num_workers=2, batches=3, warmup_batches=1, decode_device="cuda")
    res = run_one("compiled", "single", compiled=str(large), source=str(large), cfg=cfg)
    assert res["decode_stage"] == "main-process" and res["gpu_max_allocated_mb"] > 0
    assert res["gpu_max_reserved_mb"] >= res["gpu_max_allocated_mb"] and res["samples_per_s"] > 0


@pytest.mark.needs_cuda
@needs_cuda
@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
def test_cpu_decode_lands_on_the_gpu_bit_identical(large, uint8):
    """decode_device="cpu", device="cuda": CPU decode threads, uint8 channels-last pinned staging, transposed and
    divided by 255 on the GPU; the values are the CPU path's exactly (same decode, same arithmetic)."""
    want = list(roboreel.loader(_make(large, return_uint8=uint8)(), mix_workers=False, batch_size=4, num_workers=2))
    got = [_on_cpu(b) for b in roboreel.loader(_make(large, return_uint8=uint8)(), mix_workers=False, batch_size=4, num_workers=2,
                                               device="cuda")]
    assert_same_batches(got, want)


def test_gpu_decoders_keep_their_runs_under_their_own_budget(large):
    """Runs decoded on a GPU live in GPU memory under DecodeOptions.gpu_cache_mb, CPU (fallback) runs under
    cache_mb: a batch asks ~2 frames of each of its clips, and the CPU bound (96 MiB) refused most NVDEC runs."""
    ds = CompiledDataset(str(large), decode=DecodeOptions(cache_mb=8, gpu_cache_mb=512))
    opts = ds.decode_options
    assert (opts.run_cache_bytes, opts.gpu_run_cache_bytes) == (8 << 20, 512 << 20)
    assert DecodeOptions().gpu_cache_mb == 1024
    with pytest.raises(ValueError, match="gpu_cache_mb must be a number >= 0"):
        DecodeOptions(gpu_cache_mb=-1)
    router = Router("cuda:0", cameras={c.key: c for c in ds.manifest.cameras}, capability=(9, 0),
                    torchcodec_cuda=(True, "assumed"))
    cpu, gpu = RunBudget(opts.run_cache_bytes), RunBudget(opts.gpu_run_cache_bytes)
    decoders = DeviceDecoders(router, run_budget=cpu, gpu_run_budget=gpu)
    assert decoders.cpu.budget is cpu and decoders.gpu is not None and decoders.gpu.budget is gpu
    shared = DeviceDecoders(router, run_budget=cpu)  # no GPU bound given: one budget for both, as before
    assert shared.gpu is not None and shared.gpu.budget is cpu
