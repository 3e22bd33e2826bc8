"""GPU decode for CompiledDataset: device checks, per-clip routing and fallback, the ship-once deferred stream,
and the loader on a GPU (tests/test_reader_loader_plain.py holds it against the plain DataLoader on the CPU).

On a machine without CUDA everything but the ``needs_cuda`` tests runs: the loader decodes on the CPU and must
give the plain DataLoader's batches bit for bit; the fallback path is driven by torchcodec's real "Unsupported
device" error. The ``needs_cuda`` tests run the same comparisons on a GPU (run them there, see docs/gpu.md).
"""

from __future__ import annotations

import logging

import pytest
import torch
import torchcodec
from support.datasets import codes, compiled_pair
from support.loading import CAMERAS, make_dataset, on_cpu, routed_clips
from support.resume import assert_same_batches
from torch.utils.data import DataLoader

import roboreel
from roboreel.reader import CompiledDataset, DecodeOptions
from roboreel.reader.decode._deferred import ClipStore, assemble, collate_pending
from roboreel.reader.decode._gpu import DeviceDecoders
from roboreel.reader.decode._routing import Router, choose_device, parse_decode_device, resolve_decode_device
from roboreel.reader.decode._runs import RunBudget
from roboreel.reader.loader._loader import _PendingStream
from roboreel.reader.plan._epoch import World
from roboreel.reader.plan._requests import EpisodeClip

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")
HAVE_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and a CUDA build of torchcodec")
no_cuda = pytest.mark.skipif(HAVE_CUDA, reason="checks the no-CUDA behaviour")
TORCHCODEC_CPU_BUILD = torchcodec.__version__.endswith("+cpu")
ROUTING_LOG = "roboreel.reader.decode._routing"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes, 2 cameras), 2 episodes per shard: below every NVDEC minimum."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """160x160 frames: above NVDEC's HEVC minimum (144x144), so a GPU is asked to decode them."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2, episodes=3, min_length=8, max_length=12,
                         height=160, width=160)[1]


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
    ds = make_dataset(compiled)()
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


# -- on a GPU ----------------------------------------------------------------------------------------------
@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_batches_match_the_cpu_batches(large):
    """NVDEC-sized clips: frames decoded on the GPU, same keys/dtypes/shapes, same frames (pixel codes), pixel
    values within codec tolerance (NVDEC + NPP colour conversion is not bit-exact with FFmpeg's swscale)."""
    want = list(roboreel.loader(make_dataset(large)(), mix_workers=False, batch_size=4, num_workers=2))
    dl = roboreel.loader(make_dataset(large, device="cuda")(), mix_workers=False, batch_size=4, num_workers=2, pin_memory=True)
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
    want = list(roboreel.loader(make_dataset(compiled)(), mix_workers=False, batch_size=5, num_workers=2))
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        dl = roboreel.loader(make_dataset(compiled, device="cuda")(), mix_workers=False, batch_size=5, num_workers=2)
        got = [on_cpu(b) for b in dl]
    assert_same_batches(got, want)  # decoded on the CPU, moved to the GPU: identical values
    msgs = [r.getMessage() for r in caplog.records if r.name == ROUTING_LOG]
    assert len(msgs) == len(CAMERAS) and all("below NVDEC's hevc minimum" in m for m in msgs)
    clips = routed_clips(make_dataset(compiled)(), 2, 0)  # 16, or 18 where the split cut an episode in two
    st = dl.stats()
    assert st["fallback_clips"] == clips and st["clips_by_device"] == {"cpu": clips}, st


@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_dataset_is_not_iterated_in_workers(compiled):
    ds = make_dataset(compiled, device="cuda")()
    with pytest.raises(RuntimeError, match=r"read it with roboreel.loader"):
        next(iter(ds))
    with pytest.raises(RuntimeError, match=r"roboreel.loader"):
        next(iter(DataLoader(ds, batch_size=2, num_workers=2)))
    with pytest.raises(RuntimeError, match=r"no CUDA device: cuda:\d+ asked for"):
        CompiledDataset(str(compiled), decode=DecodeOptions(device=f"cuda:{torch.cuda.device_count()}"))


@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_resume_through_the_loader(large):
    make = make_dataset(large, device="cuda", epoch=1)
    full = [on_cpu(b) for b in roboreel.loader(make(), mix_workers=False, batch_size=3, num_workers=2)]
    dl = roboreel.loader(make(), mix_workers=False, batch_size=3, num_workers=2)
    it = iter(dl)
    first = [on_cpu(next(it)) for _ in range(2)]
    state = dl.state_dict()
    del it
    dl2 = roboreel.loader(make(), mix_workers=False, batch_size=3, num_workers=2)
    dl2.load_state_dict(state)
    rest = [on_cpu(b) for b in dl2]
    assert [int(i) for b in first + rest for i in b["index"]] == [int(i) for b in full for i in b["index"]]


@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_bench_reports_gpu_memory(large):
    from roboreel.bench.config import RunConfig
    from roboreel.bench.runner import run_one

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
    want = list(roboreel.loader(make_dataset(large, return_uint8=uint8)(), mix_workers=False, batch_size=4, num_workers=2))
    got = [on_cpu(b) for b in roboreel.loader(make_dataset(large, return_uint8=uint8)(), mix_workers=False, batch_size=4, num_workers=2,
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
