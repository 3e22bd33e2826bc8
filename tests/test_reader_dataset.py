"""CompiledDataset against the reference reader on the source: same samples, keys, dtypes, shapes and values."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest
import torch
from support.datasets import assert_same_sample, codes, compiled_pair

from roboreel.bench.reference import ReferenceDataset
from roboreel.formats.errors import CompiledFormatError, FrameTimestampError
from roboreel.reader import CompiledDataset, DecodeOptions
from roboreel.reader.decode._clips import DEFAULT_RUN_CACHE_BYTES, ClipDecoders, _calls, materialize
from roboreel.reader.fetch._source import SliceReader, Store
from roboreel.reader.plan._epoch import Slice
from roboreel.reader.plan._pool import EpisodeSpec, LoadedEpisode, PoolSchedule, ScheduleKey, pending_samples
from roboreel.reader.plan._requests import EpisodeClip, FrameRequest, PendingSample

CAMERAS = ["observation.images.top", "observation.images.wrist"]
# Windows that cross both episode ends (episodes are 10..60 frames at 20 fps) on tabular and camera keys.
WINDOWS = {
    "action": [-0.2, -0.05, 0.0, 0.1, 0.5],
    "observation.state": [-0.1, 0.0],
    "observation.images.top": [-0.15, 0.0, 0.1],
}
MEDIUM = {"episodes": 24, "min_length": 10, "max_length": 60, "seed": 3}


def blank_bottom(x: torch.Tensor) -> torch.Tensor:
    """A visible transform that leaves the pixel code (top-left) readable."""
    x = x.clone()
    x[..., -4:, :] = 0
    return x


@pytest.fixture(scope="module")
def medium(tmp_path_factory):
    return compiled_pair(tmp_path_factory, episodes_per_shard=3, **MEDIUM)


def _compare(samples, ref):
    want = ref.__getitems__([ref.position(int(s["index"])) for s in samples])
    for g, w in zip(samples, want, strict=True):
        assert_same_sample(g, w, CAMERAS)


def test_thousands_of_shuffled_windowed_samples_equal_the_reference(medium):
    source, compiled = medium
    ref = ReferenceDataset(str(source), delta_timestamps=WINDOWS)
    n = len(ref)
    total = 0
    for epoch in (0, 1):
        ds = CompiledDataset(str(compiled), delta_timestamps=WINDOWS, episode_pool_size=6, seed=11)
        ds.set_epoch(epoch)
        samples = list(ds)
        assert sorted(int(s["index"]) for s in samples) == list(range(n))  # every frame once
        assert [int(s["index"]) for s in samples] != list(range(n))  # and shuffled
        _compare(samples, ref)
        total += len(samples)
        pads = torch.stack([s["action_is_pad"] for s in samples])
        assert pads[:, 0].any() and pads[:, -1].any()  # windows did cross both ends
    # through a DataLoader with workers: collated batches equal the collated reference samples
    ds = CompiledDataset(str(compiled), delta_timestamps=WINDOWS, episode_pool_size=6, seed=11)
    loader = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2)
    seen = []
    for batch in loader:
        idx = [int(i) for i in batch["index"]]
        want = torch.utils.data.default_collate(ref.__getitems__(idx))
        assert list(batch) == list(want)
        for k, w in want.items():
            if k in CAMERAS:
                g = batch[k]
                assert g.dtype == w.dtype and g.shape == w.shape
                assert [codes(x) for x in g] == [codes(x) for x in w]
            elif isinstance(w, torch.Tensor):
                assert batch[k].dtype == w.dtype and torch.equal(batch[k], w), k
            else:
                assert batch[k] == w
        seen += idx
        total += len(idx)
    assert sorted(seen) == list(range(n))
    assert total >= 2500


def test_selection_transforms_and_uint8_match_the_reference(medium):
    source, compiled = medium
    kw = {"episodes": [3, 17, 4], "return_uint8": True, "image_transforms": blank_bottom,
          "delta_timestamps": {"observation.images.wrist": [-0.05, 0.0]}}
    ref = ReferenceDataset(str(source), **kw)
    samples = list(CompiledDataset(str(compiled), seed=2, **kw))
    assert sorted(int(s["index"]) for s in samples) == sorted(int(s["index"]) for s in
                                                              ref.__getitems__(list(range(len(ref)))))
    assert {int(s["episode_index"]) for s in samples} == {3, 4, 17}
    top = samples[0]["observation.images.top"]
    assert top.dtype == torch.uint8 and not top[..., -4:, :].any() and top[..., :-4, :].any()
    _compare(samples, ref)


def test_no_shuffle_is_file_order(medium):
    _, compiled = medium
    got = [int(s["index"]) for s in CompiledDataset(str(compiled), shuffle=False)]
    assert got == list(range(len(got)))


def _epoch_pending(ds: CompiledDataset, pool_size: int) -> list[PendingSample]:
    """One epoch's pending samples in pool order (shuffled GOP runs), read straight from the shards."""
    m = ds.manifest
    slices = [Slice(i, tuple(s.episodes)) for i, s in enumerate(m.shards)]
    order = [e for s in slices for e in s.episodes]
    schedule = PoolSchedule(order, [m.episode(e).length for e in order], pool_size=pool_size, shuffle=True,
                            key=ScheduleKey(0, 0), gop=ds.gop)
    reader = SliceReader(Store(ds.url), m)
    spec = EpisodeSpec(ds.tabular_keys, ds.camera_keys, {}, m.tasks)
    loaded = (LoadedEpisode(r, shard=m.shards[s].path, spec=spec) for s, r in reader.records(slices))
    return list(pending_samples(schedule, loaded))


def test_pool_keeps_decoders_bounded_and_releases_them(medium):
    """Decode on exit with decoders reused while pooled: never more than pool x cameras open, none at the end."""
    _, compiled = medium
    ds = CompiledDataset(str(compiled), episode_pool_size=3)
    decoders = ClipDecoders()
    peak = 0
    for p in _epoch_pending(ds, 3):
        materialize([p], decoders, tolerance_s=1e-4)
        peak = max(peak, len(decoders))
    assert len(decoders) == 0 and peak <= 3 * len(CAMERAS) and decoders.run_bytes == 0
    assert decoders.stats.decoder_opens == len(ds.manifest.episodes) * len(CAMERAS)
    assert decoders.stats.decoder_reuses == decoders.stats.decode_calls - decoders.stats.decoder_opens


def test_gop_runs_decode_in_one_call_within_the_byte_budget(medium):
    """A run's first frame decodes the rest of its GOP run in the same call and the next samples take them from
    the cache: at most one call per run and camera, each frame decoded once. A tight budget decodes shorter runs
    and never holds more than it; no budget is frame by frame. The samples are the same in every case."""
    _, compiled = medium
    ds = CompiledDataset(str(compiled))
    pending = _epoch_pending(ds, 3)
    m, cams = ds.manifest, len(CAMERAS)
    frame = 3 * 64 * 64
    runs = sum(-(-e.length // ds.gop) for e in m.episodes) * cams
    got = {}
    for budget in (DEFAULT_RUN_CACHE_BYTES, 3 * 10 * frame, 0):
        decoders, peak, samples = ClipDecoders(run_cache_bytes=budget), 0, []
        for i in range(0, len(pending), 5):
            samples += materialize(pending[i:i + 5], decoders, tolerance_s=1e-4)
            peak = max(peak, decoders.run_bytes)
        assert 0 < peak <= budget or peak == budget == 0
        assert decoders.run_bytes == 0 and decoders.stats.frames_decoded == m.total_frames * cams
        got[budget] = (samples, decoders.stats.decode_calls)
    ample, tight, none = (got[b][1] for b in got)
    assert ample <= runs < tight < none
    for b in got:
        for s, want in zip(got[b][0], got[0][0], strict=True):
            assert all(torch.equal(s[cam], want[cam]) for cam in CAMERAS) and s["index"] == want["index"]
    with pytest.raises(ValueError, match="run_cache_bytes"):
        ClipDecoders(run_cache_bytes=-1)


def test_frame_timestamp_check_names_the_clip(medium):
    _, compiled = medium
    ds = CompiledDataset(str(compiled))
    m = ds.manifest
    rec = next(SliceReader(Store(str(compiled)), m).records([Slice(0, (m.shards[0].episodes[0],))]))[1]
    clip = EpisodeClip(m.shards[0].path, rec.index, CAMERAS[0], rec.clips[CAMERAS[0]])
    ok = FrameRequest(clip, np.array([3]), np.array([0.15]), False)
    (sample,) = materialize([PendingSample(rec.index, 3, {}, {CAMERAS[0]: ok})], ClipDecoders(), tolerance_s=1e-4)
    assert codes(sample[CAMERAS[0]])[0][1:] == (rec.index, 0)
    off = FrameRequest(clip, np.array([3]), np.array([0.16]), False)
    with pytest.raises(FrameTimestampError, match=rf"{clip.name}.*episode {rec.index}"):
        materialize([PendingSample(rec.index, 3, {}, {CAMERAS[0]: off})], ClipDecoders(), tolerance_s=1e-4)


def test_arguments_are_checked(medium, tmp_path):
    _, compiled = medium
    with pytest.raises(ValueError, match="decode_device"):
        CompiledDataset(str(compiled), decode=DecodeOptions(device="tpu"))
    with pytest.raises(ValueError, match=r"episodes \[999\]"):
        CompiledDataset(str(compiled), episodes=[1, 999])
    with pytest.raises(ValueError, match="'actions' is not a feature"):
        CompiledDataset(str(compiled), delta_timestamps={"actions": [0.0]})
    with pytest.raises(ValueError, match="frame_order must be one of"):
        CompiledDataset(str(compiled), frame_order="gop")
    with pytest.raises(ValueError, match="spread must be a positive integer or None, got 0"):
        CompiledDataset(str(compiled), spread=0)
    with pytest.raises(ValueError, match="DecodeOptions.cache_mb must be a number >= 0, got -1"):
        DecodeOptions(cache_mb=-1)
    with pytest.raises(CompiledFormatError, match="no manifest"):
        CompiledDataset(str(tmp_path))


def test_approximate_seek_mode_is_exact_on_compiled_clips(medium):
    """Compiled clips are constant-fps with pts from 0, so torchcodec's "approximate" mode (no index scan when
    a decoder opens) lands on the same frames as "exact", in any access order."""
    _, compiled = medium
    m = CompiledDataset(str(compiled)).manifest
    _, rec = next(SliceReader(Store(str(compiled)), m).records([Slice(1, tuple(m.shards[1].episodes[:1]))]))
    order = np.random.default_rng(0).permutation(rec.length).tolist()
    for cam, data in rec.clips.items():
        approx = ClipDecoders(seek_mode="approximate")
        exact = ClipDecoders(seek_mode="exact")
        clip = EpisodeClip("s", rec.index, cam, data)
        for f in order:
            (a, pa), (e, pe) = approx.frames(clip, {f: 0})[f], exact.frames(clip, {f: 0})[f]
            assert torch.equal(a, e) and pa == pe == pytest.approx(f / m.fps, abs=1e-9)


def test_a_call_mixing_two_gop_runs_continues_before_it_seeks_back(medium):
    """A batch holding the end of one GOP run of a clip and the start of an earlier one ([20, 44] with the decoder
    at 43): the decoder continues to 44 first, then seeks back to 20, in two calls (one sorted call would seek to
    20 and then re-decode 40-43 to reach 44), and every frame is the one asked for (pixel codes), also after."""
    _, compiled = medium
    ds = CompiledDataset(str(compiled))
    ep = max(ds.manifest.episodes, key=lambda e: e.length)
    assert ep.length >= 50
    shard = next(s for s in ds.manifest.shards if ep.index in s.episodes)
    with tarfile.open(compiled / shard.path) as tar:
        data = tar.extractfile(f"{ep.index:06d}.{CAMERAS[0]}.mp4").read()
    clip = EpisodeClip(shard.path, ep.index, CAMERAS[0], data)
    decoders = ClipDecoders()
    for asked, calls in (([40, 41, 42], 1), ([43], 1), ([20, 44], 2), ([21, 22], 1), ([45, 46], 1), ([23, 47], 2)):
        before = decoders.stats.decode_calls
        got = decoders.frames(clip, dict.fromkeys(asked, 0))
        assert decoders.stats.decode_calls - before == calls
        assert [codes(got[f][0])[0][:2] for f in asked] == [(ep.from_index + f, ep.index) for f in asked]
    assert list(_calls([5, 9, 40, 41], 8, 1)) == [[9], [40], [41], [5]]
    assert list(_calls([5, 9, 40, 41], -1, 3)) == [[5, 9, 40], [41]]
