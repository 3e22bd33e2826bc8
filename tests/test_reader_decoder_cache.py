"""Decoders kept open across epochs (reader/decode/_decoder_cache.py): the same frames as fresh ones, within the bound;
when the automatic default keeps them (reader/decode/_idle_policy.py)."""

from __future__ import annotations

import pytest
import torch
from support.datasets import assert_same_sample, codes
from support.resume import assert_same_batches
from torchcodec.decoders import VideoDecoder

from roboreel.reader import CompiledDataset, DecodeOptions
from roboreel.reader.decode._clips import ClipDecoders
from roboreel.reader.decode._decoder_cache import IdleDecoders, decoder_bytes, process_cache
from roboreel.reader.decode._idle_policy import AUTO_BUDGET_BYTES, IdlePolicy
from roboreel.reader.fetch._source import SliceReader, Store
from roboreel.reader.plan._epoch import Slice
from roboreel.reader.plan._requests import EpisodeClip
from roboreel.reader.plan._shuffled import MAX_RUNS

DECODER_64 = decoder_bytes(64, 64)  # the fixtures' clips are 64x64


def _parked() -> IdleDecoders:
    """This process's cache at the automatic bound (``process_cache(b)`` also resizes it to ``b``)."""
    return process_cache(AUTO_BUDGET_BYTES)


def _clips(compiled, n: int) -> list[EpisodeClip]:
    """The first ``n`` episodes' clips of the first camera, bytes read from the shards."""
    ds = CompiledDataset(str(compiled))
    m, cam = ds.manifest, ds.camera_keys[0]
    slices = [Slice(i, tuple(s.episodes)) for i, s in enumerate(m.shards)]
    out = []
    for shard, rec in SliceReader(Store(str(compiled)), m).records(slices):
        out.append(EpisodeClip(m.shards[shard].path, rec.index, cam, rec.clips[cam]))
    return out[:n]


def _frames(decoders: ClipDecoders, clip: EpisodeClip, frames: list[int]) -> dict[int, torch.Tensor]:
    return {f: t for f, (t, _) in decoders.frames(clip, dict.fromkeys(frames, 0)).items()}


def test_a_parked_decoder_seeks_back_and_gives_a_fresh_decoders_frames(small_compiled):
    """A decoder parked after reading a clip's end is taken back by the next epoch's ClipDecoders (no open) and
    decodes the clip's start exactly as a decoder opened afresh: same pixels, same pts, the right pixel codes."""
    (clip,) = _clips(small_compiled, 1)
    n = VideoDecoder(clip.data).metadata.num_frames
    idle = IdleDecoders(64 << 20)
    first = ClipDecoders(idle=idle)
    _frames(first, clip, list(range(n - 4, n)))
    first.release(clip)
    assert len(idle) == 1 and len(first) == 0
    # the next epoch: the same clip, its bytes read again (another object), another stream
    again = EpisodeClip(clip.shard, clip.episode, clip.camera, bytes(bytearray(clip.data)), stream=1)
    second, fresh = ClipDecoders(idle=idle), ClipDecoders()
    wanted = [0, 1, 5, n - 1]
    got, want = _frames(second, again, wanted), _frames(fresh, clip, wanted)
    assert second.stats.decoder_opens == 0 and second.stats.decoder_reuses == 1 and len(idle) == 0
    assert fresh.stats.decoder_opens == 1
    for f in wanted:
        assert torch.equal(got[f], want[f]) and codes(got[f])[0][1] == clip.episode
    assert [codes(got[f])[0][0] for f in wanted] == [codes(want[f])[0][0] for f in wanted]
    second.close()  # close parks what is still open
    assert len(idle) == 1 and len(second) == 0


def test_a_parked_decoder_is_used_only_for_the_same_bytes(small_compiled):
    """Two datasets can name their shards alike: a clip whose bytes differ opens its own decoder."""
    a, b = _clips(small_compiled, 2)
    idle = IdleDecoders(64 << 20)
    dec = VideoDecoder(a.data)
    idle.put(("s", 0, "cam", 0, "approximate"), dec, a.data)
    assert idle.take(("s", 0, "cam", 0, "approximate"), b.data) is None
    assert len(idle) == 0 and idle.nbytes == 0  # the stale one is dropped
    idle.put(("s", 0, "cam", 0, "approximate"), dec, a.data)
    assert idle.take(("s", 0, "cam", 0, "approximate"), bytes(bytearray(a.data))) is dec


def test_the_byte_bound_holds_and_evicts_least_recently_parked(small_compiled):
    clips = _clips(small_compiled, 4)
    each = DECODER_64 + max(len(c.data) for c in clips)
    idle = IdleDecoders(2 * each)
    decoders = ClipDecoders(idle=idle)
    for c in clips:
        _frames(decoders, c, [0])
        decoders.release(c)
        assert idle.nbytes <= idle.max_bytes and len(idle) <= 2
    assert len(idle) == 2
    assert idle.take(decoders._idle_key((clips[0].key, 0)), clips[0].data) is None  # evicted first
    assert idle.take(decoders._idle_key((clips[3].key, 0)), clips[3].data) is not None
    idle.resize(0)
    assert len(idle) == 0 and idle.nbytes == 0
    small = IdleDecoders(DECODER_64 // 2)  # a decoder that does not fit alone is closed, as without the cache
    small.put(("s", 0, "cam", 0, "approximate"), VideoDecoder(clips[0].data), clips[0].data)
    assert len(small) == 0 and small.nbytes == 0
    with pytest.raises(ValueError, match="max_bytes"):
        IdleDecoders(-1)


def _epochs(ds: CompiledDataset, epochs: int) -> tuple[list[list[dict]], list[int]]:
    """Samples of each epoch read in this process, and the decoders opened in each."""
    out, opens = [], []
    for e in range(epochs):
        ds.set_epoch(e)
        before = ds.stats()["decoder_opens"]
        out.append(list(ds))
        opens.append(ds.stats()["decoder_opens"] - before)
    return out, opens


@pytest.mark.parametrize("bound", ["all", "three"])
def test_epochs_read_exactly_with_the_cache_and_open_nothing_once_it_holds_the_dataset(small_compiled, bound):
    """Three shuffled epochs with a window on a camera (several lanes per clip): every sample equals the one read
    without the cache. A cache that holds every lane of every clip opens none after the first epoch; one that
    holds three decoders stays within its bound and keeps opening."""
    windows = {"observation.images.top": [-0.1, 0.0], "action": [0.0, 0.05]}
    ref = CompiledDataset(str(small_compiled), delta_timestamps=windows, episode_pool_size=2,
                          decode=DecodeOptions(idle_decoders_mb=0))
    mb = 64 if bound == "all" else 3 * (DECODER_64 + (64 << 10)) / 2**20
    ds = CompiledDataset(str(small_compiled), delta_timestamps=windows, episode_pool_size=2,
                         decode=DecodeOptions(idle_decoders_mb=mb))
    want, want_opens = _epochs(ref, 3)
    try:
        got, opens = _epochs(ds, 3)
        cache = process_cache(ds.decode_options.idle_decoders_bytes)
        assert cache is not None and 0 < cache.nbytes <= ds.decode_options.idle_decoders_bytes
        parked = len(cache)
        assert sum(1 for _ in ref) == len(want[0]) and len(cache) == parked  # a dataset without it leaves it alone
    finally:
        process_cache(1).resize(0)  # empty this process's cache for the other tests
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w) > 0
        for a, b in zip(g, w, strict=True):
            assert_same_sample(a, b, ds.camera_keys)
    assert opens[0] == want_opens[0] > len(ds.manifest.episodes) * len(ds.camera_keys)  # lanes: more than clips
    if bound == "all":
        assert opens[1:] == [0, 0]
    else:
        assert min(opens[1:]) > 0 and len(cache) <= 3


@pytest.mark.parametrize(("mb", "persistent", "kept_from"), [(64, True, 1), (None, True, 2), (None, False, None)],
                         ids=["explicit", "automatic", "automatic-non-persistent"])
def test_dataloader_workers_keep_their_own_cache(small_compiled, mb, persistent, kept_from):
    """A persistent DataLoader worker parks its decoders between epochs: with an explicit bound it opens none
    after its first epoch, in the automatic mode none after its second (the first parks nothing: the worker may
    live one epoch only). A worker that is a new process every epoch never parks and opens every clip's lanes each
    time, as many as a reader without the cache opens.
    The batches equal those read without the cache."""
    ds = CompiledDataset(str(small_compiled), decode=DecodeOptions(idle_decoders_mb=mb), return_uint8=True)
    ref = CompiledDataset(str(small_compiled), decode=DecodeOptions(idle_decoders_mb=0), return_uint8=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1, persistent_workers=persistent)
    opens, lanes = [], []
    for e in range(3):
        ds.set_epoch(e)
        ref.set_epoch(e)
        before = ds.stats()["decoder_opens"]
        got = [b for b in loader]
        opens.append(ds.stats()["decoder_opens"] - before)
        ref_before = ref.stats()["decoder_opens"]
        want = list(torch.utils.data.DataLoader(ref, batch_size=4, num_workers=0))
        lanes.append(ref.stats()["decoder_opens"] - ref_before)  # one decoder per clip and lane of this epoch
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g["index"], w["index"])
            assert all(torch.equal(g[c], w[c]) for c in ds.camera_keys)
    assert min(lanes) >= len(ds.manifest.episodes) * len(ds.camera_keys)
    assert opens == [lanes[e] if kept_from is None or e < kept_from else 0 for e in range(3)]
    assert len(_parked()) == 0  # the workers' caches, not this process's


WINDOWS = {"observation.images.top": [-0.1, 0.0], "action": [0.0, 0.05]}  # a camera window: two lanes per clip


def test_automatic_mode_parks_from_the_second_epoch_exactly_what_it_estimated(small_compiled):
    """The default (automatic) in one process: epoch 0 opens and closes every clip x lane, epoch 1 opens them again
    and parks them, epoch 2 takes them back; every sample equals the one read with the cache off. What is parked
    is every clip x lane, and its bytes by the cache's own accounting are the policy's estimate."""
    # one run per episode at a time (frame_order="segments"): a clip's lanes are its window's alone
    ds = CompiledDataset(str(small_compiled), delta_timestamps=WINDOWS, episode_pool_size=2,
                         frame_order="segments")
    ref = CompiledDataset(str(small_compiled), delta_timestamps=WINDOWS, episode_pool_size=2,
                          decode=DecodeOptions(idle_decoders_mb=0), frame_order="segments")
    assert ds.decode_options.idle_decoders_bytes is None and ds.decode_options.idle_decoders_mb is None
    want, want_opens = _epochs(ref, 3)
    got, opens = _epochs(ds, 3)
    n = want_opens[0]
    clips = len(ds.manifest.episodes) * len(ds.camera_keys)
    assert n == clips + len(ds.manifest.episodes)  # the windowed camera's clips have two lanes each
    assert want_opens == [n, n, n] and opens == [n, n, 0]
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w) > 0
        for a, b in zip(g, w, strict=True):
            assert_same_sample(a, b, ds.camera_keys)
    cache = _parked()
    assert len(cache) == n and cache.nbytes == ds.idle_policy.need() <= ds.idle_policy.budget


def test_a_dataset_above_the_automatic_budget_gets_no_cache(small_compiled):
    """A dataset whose clips x lanes do not all fit the budget parks none (a fraction would slow the creep in
    proportion only, at full price): it opens every clip every epoch. At exactly the budget it fits."""
    ds = CompiledDataset(str(small_compiled), frame_order="segments")  # one lane a clip
    need = ds.idle_policy.need()
    clips = len(ds.manifest.episodes) * len(ds.camera_keys)
    shuffled = CompiledDataset(str(small_compiled)).idle_policy.need()  # the default order: up to MAX_RUNS lanes
    assert shuffled > MAX_RUNS * clips * DECODER_64
    assert clips * DECODER_64 < need < clips * (DECODER_64 + (64 << 10))  # decoders + the clips' own bytes
    decoders = clips * DECODER_64
    assert ds.idle_policy.need(budget=decoders - 1) == decoders  # known above it: no episode detail read
    ds.idle_policy = IdlePolicy(None, ds.idle_policy.need, budget=need - 1)
    assert _epochs(ds, 3)[1] == [clips] * 3 and len(_parked()) == 0
    ds.idle_policy = IdlePolicy(None, ds.idle_policy.need, budget=need)
    assert _epochs(ds, 3)[1] == [clips, clips, 0] and _parked().nbytes == need


def test_a_dataset_that_fits_one_episode_pool_parks_its_decoders_above_the_budget(small_compiled):
    """Every episode in one pool: every clip x lane is open while an epoch runs, so parking them costs next to no
    peak memory, and the automatic mode parks them whatever the budget (opens n, n, 0); with a pool smaller than
    the dataset the budget decides, as before."""
    ds = CompiledDataset(str(small_compiled), frame_order="segments")
    clips = len(ds.manifest.episodes) * len(ds.camera_keys)
    assert len(ds.manifest.episodes) <= ds.episode_pool_size
    need = ds.idle_policy.need()
    ds.idle_policy = IdlePolicy(None, ds.idle_policy.need, budget=need - 1, whole_pool=ds._fits_one_pool)
    assert _epochs(ds, 3)[1] == [clips, clips, 0] and _parked().nbytes == need
    small = CompiledDataset(str(small_compiled), frame_order="segments", episode_pool_size=2)
    assert not small._fits_one_pool()
    small.idle_policy = IdlePolicy(None, small.idle_policy.need, budget=need - 1, whole_pool=small._fits_one_pool)
    assert not small.idle_policy.fits and [small.idle_policy.begin(), small.idle_policy.begin()] == [None, None]


def test_the_loader_decode_stage_keeps_its_cpu_decoders_from_its_second_epoch(small_compiled):
    """roboreel.loader decodes in this process, which lives across epochs: its CPU decoders follow the same policy
    (opens n, n, 0) and its batches equal those of a loader with the cache off."""
    import roboreel

    def run(mb):
        ds = CompiledDataset(str(small_compiled), delta_timestamps=WINDOWS, episode_pool_size=2, return_uint8=True,
                             decode=DecodeOptions(idle_decoders_mb=mb))
        dl = roboreel.loader(ds, batch_size=4, num_workers=1, persistent_workers=True, decode_threads=2)
        batches, opens = [], []
        for e in range(3):
            dl.set_epoch(e)
            before = dl.stats()["decoder_opens"]
            batches.append(list(dl))
            opens.append(dl.stats()["decoder_opens"] - before)
        dl.close()
        return batches, opens

    want, want_opens = run(0)
    got, opens = run(None)
    n = want_opens[0]
    assert n > 0 and want_opens == [n, n, n] and opens == [n, n, 0]
    assert len(_parked()) == n
    for g, w in zip(got, want, strict=True):
        assert_same_batches(g, w)
