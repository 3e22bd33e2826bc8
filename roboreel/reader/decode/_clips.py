"""Decode on exit: turn pending samples (tabular values + which frames of which compressed clip) into samples.

The pool never holds pixels. A ``PendingSample`` names, per camera, an ``EpisodeClip`` (identity + compressed
bytes) and the clip frame numbers its window needs; ``materialize`` decodes a list of pending samples with one
batched, sorted ``get_frames_at`` call per clip, checks each frame's pts against the timestamp it should show, and
builds the LeRobot-shaped dicts. ``ClipDecoders`` keeps one torchcodec decoder per pooled clip, reused across samples
(clips are emitted mostly forward, so a reused decoder rarely seeks), and drops it when the pool releases the
clip, so memory stays bounded by the pool size. When a request promises the rest of a GOP run (``run_end``), the
whole run is decoded in one call and its later frames wait, decoded, in a byte-bounded cache (see ``ClipDecoders``).

Nothing here depends on where the pending samples came from or which device decodes: a GPU path can ship pending
samples from DataLoader workers to the main process and call ``materialize`` there with ``device="cuda"``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torchcodec.decoders import VideoDecoder  # loaded once in the parent, so forked workers inherit it

from roboreel.formats.depth import DepthQuant
from roboreel.formats.errors import CompiledFormatError, FrameTimestampError
from roboreel.reader.decode._counters import SEEK_MODES, DecodeStats, SeekMode
from roboreel.reader.decode._decoder_cache import IdleDecoders
from roboreel.reader.decode._depth import DepthDecoder, code_table
from roboreel.reader.decode._heap import in_side_arena
from roboreel.reader.decode._images import NO_IMAGE_CLIPS, ImageClips, decoded_images, finish_images
from roboreel.reader.decode._runs import DEFAULT_RUN_CACHE_BYTES, DecodedRun, RunBudget, run_ahead
from roboreel.reader.decode._unit import unit_float
from roboreel.reader.plan import EpisodeClip, PendingSample


@dataclass
class ClipDecoders:
    """torchcodec decoders for live clips, created from the in-memory bytes on first use and reused.

    A clip's frames leave the pool mostly in forward order, so a reused decoder rarely seeks. A camera window
    (say ``[-1 s, 0]``) asks for frames at several distances from the current one; one decoder serving them all
    would jump back to a keyframe for every sample. So each offset of a window gets its own *lane* (a decoder of
    the same clip), and each lane moves forward on its own (measured at GOP 10, 224x224: [-1 s, 0] from 340 to
    1,700 samples/s). ``keep`` (camera -> frames) additionally holds the last few decoded frames of a windowed
    camera's clips, least recently used out first, since neighbouring samples share window frames.

    Run cache (_runs.py): frames leave the pool in GOP runs, one run of a clip front to back, so a frame asked with
    a ``run_end`` names the frames the next samples of that clip will ask. They are decoded with it, back to back
    (one call per run instead of one per frame: ~3,000 -> ~4,000 frames/s inside the calls, 224x224, GOP 10), and
    kept until asked. ``budget`` (default: one of ``run_cache_bytes`` of its own; the decode stage shares one
    between all its clips' decoders) bounds what the runs hold; a run that does not fit is decoded shorter (down
    to the asked frame alone), never evicting another (its frames would cost a seek back).

    Output size per call: torchcodec returns every call's frames in a new tensor. ``max_call_bytes`` (0: no
    limit) splits a call whose frames would be larger into several, so each output comes from reused heap memory
    instead of a fresh mmap (glibc maps anything above its mmap threshold, and every page of a fresh mapping faults
    and is zeroed on first write): the decode stage sets it just under its pinned threshold (_heap.py), which took
    ~0.3 ms of CPU off every 480x640 frame (``perf``: those faults were ~9% of the training process).

    Memory: ``episode_pool_size x cameras`` decoders (x lanes for windowed cameras), released with their
    episode; ``max_open`` is a safety bound (least recently used decoders closed beyond it); at most
    ``run_cache_bytes`` of decoded runs. With ``idle`` (CPU only), a released clip's decoders are parked there and
    taken back when the clip is pooled again, in a later epoch, instead of opening new ones (_decoder_cache.py).
    """

    device: str = "cpu"
    seek_mode: SeekMode = "approximate"
    max_open: int = 4096
    keep: dict[str, int] = field(default_factory=dict)
    run_cache_bytes: int = DEFAULT_RUN_CACHE_BYTES
    max_call_bytes: int = 0
    stats: DecodeStats = field(default_factory=DecodeStats)
    idle: IdleDecoders | None = None
    budget: RunBudget | None = None
    depth: dict[str, DepthQuant] = field(default_factory=dict)  # depth cameras: PyAV + dequantised (_depth.py)
    _tables: dict = field(default_factory=dict)  # depth camera -> its code table
    _open: OrderedDict = field(default_factory=OrderedDict)
    _sources: dict = field(default_factory=dict)  # with ``idle``: the bytes each open decoder decodes
    _kept: dict = field(default_factory=dict)
    _runs: dict = field(default_factory=dict)
    _pos: dict = field(default_factory=dict)  # (clip key, lane) -> the last frame that decoder returned
    run_bytes: int = field(default=0, init=False)  # bytes this object's runs hold in the budget now

    def __post_init__(self) -> None:
        if self.seek_mode not in SEEK_MODES:
            raise ValueError(f"seek_mode must be one of {SEEK_MODES}, got {self.seek_mode!r}")
        if self.budget is None:
            self.budget = RunBudget(self.run_cache_bytes)  # validates the bound

    def decoder(self, clip: EpisodeClip, lane: int = 0) -> Any:
        key = (clip.key, lane)
        dec = self._open.get(key)
        if dec is not None:
            self._open.move_to_end(key)
            self.stats.decoder_reuses += 1
            return dec
        dec = self.idle.take(self._idle_key(key), clip.data) if self.idle is not None else None
        if dec is not None:  # parked when this clip left the pool, in an earlier epoch
            self.stats.decoder_reuses += 1
        elif clip.camera in self.depth:
            quant = self.depth[clip.camera]
            table = self._tables.get(clip.camera)
            if table is None:
                table = self._tables[clip.camera] = code_table(quant)
            dec = DepthDecoder(clip.data, quant, table=table, device=self.device)
            self.stats.decoder_opens += 1
        else:
            if self.device == "cpu":  # opened aside: torch's per-open leak stays out of the main arena (_heap.py)
                dec = in_side_arena(VideoDecoder, clip.data, seek_mode=self.seek_mode, device=self.device)
            else:
                dec = VideoDecoder(clip.data, seek_mode=self.seek_mode, device=self.device)
            self.stats.decoder_opens += 1
        self._open[key] = dec
        self._pos.pop(key, None)  # a new or parked decoder: its position is not what the key's last one had
        if self.idle is not None:
            self._sources[key] = clip.data
        while len(self._open) > self.max_open:
            gone = self._open.popitem(last=False)[0]
            self._sources.pop(gone, None)
            self._pos.pop(gone, None)
        return dec

    def _opened(self, clip: EpisodeClip, lane: int) -> Any:
        """``decoder(clip, lane)``, a clip torchcodec cannot open reported as a CompiledFormatError naming it."""
        t0 = time.perf_counter()
        try:
            dec = self.decoder(clip, lane)
        except (RuntimeError, IndexError, ValueError) as e:
            raise CompiledFormatError(f"cannot open {clip.name}: {e}", file=clip.shard, episode=clip.episode) from e
        self.stats.decode_seconds += time.perf_counter() - t0  # opening counts as decoding, as in ``_decode``
        return dec

    def _decode(self, clip: EpisodeClip, lane: int, indices: list[int], dec: Any = None) -> Any:
        """One ``get_frames_at`` call (a FrameBatch: data [N, C, H, W] uint8, pts_seconds), counted."""
        t0 = time.perf_counter()
        try:
            batch = (self.decoder(clip, lane) if dec is None else dec).get_frames_at(indices)
        except (RuntimeError, IndexError, ValueError) as e:
            raise CompiledFormatError(f"cannot decode frames {indices} of {clip.name}: {e}", file=clip.shard,
                                      episode=clip.episode) from e
        self.stats.decode_seconds += time.perf_counter() - t0
        self.stats.decode_calls += 1
        self.stats.frames_decoded += len(indices)
        self._pos[(clip.key, lane)] = max(indices)
        return batch

    def frames(self, clip: EpisodeClip, wanted: dict[int, int],
               runs: Mapping[int, int] | None = None) -> dict[int, tuple[torch.Tensor, float]]:
        """Frames of ``clip`` (frame -> lane to decode it on): frame -> (uint8 [C, H, W], pts in seconds).

        ``runs`` (frame -> run end, lane 0 only): the frames after it up to the run end will be asked next, in
        order, one each; they are decoded now and cached (see the class doc)."""
        if runs:
            return self._run_frames(clip, wanted, runs)
        keep = self.keep.get(clip.camera, 0)
        kept: OrderedDict = self._kept.setdefault(clip.key, OrderedDict()) if keep else OrderedDict()
        out = {}
        lanes: dict[int, list[int]] = {}
        for f in sorted(wanted):
            if f in kept:
                kept.move_to_end(f)
                out[f] = kept[f]
            else:
                lanes.setdefault(wanted[f], []).append(f)
        for lane, misses in sorted(lanes.items()):
            dec = self._opened(clip, lane)  # once per lane, as the counters expect (then its position is known)
            step = self._frames_per_call(dec)
            for part in _calls(misses, self._pos.get((clip.key, lane), -1), step):
                batch = self._decode(clip, lane, part, dec)
                for f, frame, pts in zip(part, batch.data, batch.pts_seconds.tolist(), strict=True):
                    out[f] = (frame, pts)
                    if keep:  # a copy, so a kept frame does not pin the whole decoded batch
                        kept[f] = (frame.clone() if len(part) > 1 else frame, pts)
            while len(kept) > keep:
                kept.popitem(last=False)
        return out

    def _frames_per_call(self, dec: Any) -> int:
        """Frames per ``get_frames_at`` call, so its output tensor stays under ``max_call_bytes`` (see the class doc)."""
        if not self.max_call_bytes:
            return 1 << 30
        frame_bytes = _frame_bytes(dec)
        return max(1, self.max_call_bytes // frame_bytes) if frame_bytes else 1 << 30

    def _run_frames(self, clip: EpisodeClip, wanted: dict[int, int],
                    runs: Mapping[int, int]) -> dict[int, tuple[torch.Tensor, float]]:
        """``frames`` with the run cache: each lane of the clip (one run of the default order each, _shuffled.py;
        lane 0 alone otherwise) keeps the decoded rest of its current run."""
        lanes: dict[int, list[int]] = {}
        for f in sorted(wanted):
            lanes.setdefault(wanted[f], []).append(f)
        out: dict[int, tuple[torch.Tensor, float]] = {}
        for lane, frames in lanes.items():
            self._lane_run_frames(clip, lane, frames, runs, out)
        return out

    def _lane_run_frames(self, clip: EpisodeClip, lane: int, frames: list[int], runs: Mapping[int, int],
                         out: dict[int, tuple[torch.Tensor, float]]) -> None:
        """Sorted ``frames`` of one lane into ``out``: from the lane's cached run, or decoded with the rest of their
        runs (as far as the budget grants), which are cached for the next asks."""
        key = (clip.key, lane)
        run: DecodedRun | None = self._runs.get(key)
        misses = []
        for f in frames:
            hit = run.frames.pop(f, None) if run is not None else None
            if hit is None:
                misses.append(f)
            else:
                out[f] = hit
        if run is not None and (misses or not run.frames):  # used up, or out of order (then stale)
            self._drop_run(key)
        if not misses:
            return
        dec = self._opened(clip, lane)
        frame_bytes = _frame_bytes(dec)
        step = self._frames_per_call(dec)
        # one call ahead at most: a lane of the default order gives a frame every few batches, and what a longer
        # decode keeps waits that much longer in memory, for no fewer calls
        ahead = run_ahead(misses, runs)[:max(0, step - len(misses))]
        # room for the calls' every frame (a cached view keeps its call's whole output alive), or no run at all
        n = self.budget.reserve(len(misses) + len(ahead), frame_bytes, at_least=len(misses) + 1) if ahead else 0
        ahead = ahead[:max(0, n - len(misses))]
        asked = set(misses)
        cached = {}
        for part in _calls(sorted(misses + ahead), self._pos.get(key, -1), step):
            batch = self._decode(clip, lane, part, dec)
            for f, frame, pts in zip(part, batch.data, batch.pts_seconds.tolist(), strict=True):
                if f in asked:
                    out[f] = (frame, pts)
                else:
                    cached[f] = (frame, pts)
        if cached:
            self._runs[key] = DecodedRun(cached, n * frame_bytes)
            self.run_bytes += n * frame_bytes
        elif n:
            self.budget.release(n * frame_bytes)

    def _drop_run(self, key: tuple) -> None:
        """Release the cached run of ``key`` ((clip key, lane)), if any."""
        run = self._runs.pop(key, None)
        if run is not None:
            self.run_bytes -= run.nbytes
            self.budget.release(run.nbytes)

    def _idle_key(self, key: tuple) -> tuple:
        """A decoder's key in ``idle``: its clip without the stream (which differs between epochs), its lane."""
        (shard, episode, camera, _), lane = key
        return (shard, episode, camera, lane, self.seek_mode)

    def _park(self, key: tuple, dec: Any) -> None:
        data = self._sources.pop(key, None)
        if dec is not None and data is not None and self.idle is not None and self.device == "cpu":
            self.idle.put(self._idle_key(key), dec, data)

    def release(self, clip: EpisodeClip) -> None:
        for key in [k for k in self._open if k[0] == clip.key]:  # every lane: window offsets x runs (_shuffled.py)
            self._park(key, self._open.pop(key))
        for key in [k for k in self._pos if k[0] == clip.key]:
            self._pos.pop(key)  # a decoder taken back from the idle cache starts with its position unknown
        self._kept.pop(clip.key, None)
        for key in [k for k in self._runs if k[0] == clip.key]:  # every lane's run
            self._drop_run(key)

    def close(self) -> None:
        for key, dec in self._open.items():
            self._park(key, dec)
        self._open.clear()
        self._pos.clear()
        self._sources.clear()
        self._kept.clear()
        for key in list(self._runs):
            self._drop_run(key)

    def __len__(self) -> int:
        return len(self._open)


def _frame_bytes(dec: Any) -> int:
    """Bytes of one decoded frame of ``dec``: uint8 RGB, or a depth decoder's own (0 when its metadata lacks the
    size)."""
    if isinstance(dec, DepthDecoder):
        return dec.frame_bytes
    md = dec.metadata
    return 3 * (md.width or 0) * (md.height or 0)


def _calls(frames: list[int], pos: int, step: int) -> Iterator[list[int]]:
    """The ``get_frames_at`` calls for sorted ``frames`` on a decoder that last returned frame ``pos``: the frames
    after ``pos`` first, then those at or before it, each in calls of at most ``step`` frames.

    Why this order: a batch can hold the last frames of one GOP run of a clip and the first of the clip's next run
    elsewhere in the clip, say [30, 99] with the decoder at 98. In one sorted call the decoder would seek back to 30,
    then jump forward to 99, decoding the whole GOP 90-98 again to reach it, and the next batch's 31 would seek back
    once more. Continuing to 99 first and then seeking to 30 decodes each frame once (measured on 480x640 ALOHA
    footage: ~15% of calls had such a pair; libavcodec's share of the CPU fell accordingly)."""
    ahead = [f for f in frames if f > pos]
    behind = [f for f in frames if f <= pos]
    for group in (ahead, behind):
        for i in range(0, len(group), step):
            yield group[i:i + step]


def value_tensors(values: Mapping[str, Any]) -> dict[str, Any]:
    """A pending sample's values as the sample holds them: numpy arrays become tensors (sharing their memory)."""
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in values.items()}


def to_output(frames: torch.Tensor, *, return_uint8: bool) -> torch.Tensor:
    """A fresh tensor as the sample holds it: uint8, or float32 in [0, 1] computed as ``x / 255.0`` exactly like
    LeRobot (one pass, correctly rounded on every device: _unit.py). A depth map (float32 already,
    in its unit) is only copied: ``return_uint8`` does not apply to depth, as in LeRobot."""
    if frames.dtype != torch.uint8:
        return frames.clone()
    return frames.clone() if return_uint8 else unit_float(frames)


def materialize(
    batch: Sequence[PendingSample],
    decoders: ClipDecoders,
    *,
    tolerance_s: float,
    return_uint8: bool = False,
    image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
    image_clips: ImageClips = NO_IMAGE_CLIPS,
) -> list[dict[str, Any]]:
    """Decode ``batch`` (one sorted call per clip, none when its run is cached) and return the sample dicts,
    cameras first (LeRobot's order; ``image_clips``: image features as LeRobot returns them, decode/_images.py)."""
    wanted: dict[tuple, tuple[EpisodeClip, dict[int, float], dict[int, int], dict[int, int]]] = {}
    for p in batch:
        for req in p.video.values():
            _, frames, lanes, runs = wanted.setdefault(req.clip.key, (req.clip, {}, {}, {}))
            if req.run_end is not None:
                runs[int(req.frames[0])] = req.run_end
            lane_of = req.lanes.tolist() if req.lanes is not None else [0] * len(req.frames)
            for f, q, lane in zip(req.frames.tolist(), req.queried_s.tolist(), lane_of, strict=True):
                frames[f] = q
                lanes[f] = min(lane, lanes.get(f, lane))
    decoded: dict[tuple, dict[int, tuple[torch.Tensor, float]]] = {}
    for key, (clip, frames, lanes, runs) in wanted.items():
        got = decoders.frames(clip, lanes, runs)
        for f, (_, pts) in got.items():
            if not abs(pts - frames[f]) < tolerance_s:
                raise FrameTimestampError(video=clip.name, episode=clip.episode, queried_s=frames[f], loaded_s=pts,
                                          tolerance_s=tolerance_s)
        decoded[key] = got
    out = []
    for p in batch:
        sample: dict[str, Any] = {}
        for cam, req in p.video.items():
            got = decoded[req.clip.key]
            if req.stacked:
                frames = torch.stack([got[f][0] for f in req.frames.tolist()])
            else:
                frames = got[int(req.frames[0])][0]  # a view; to_output copies it
            img = to_output(frames, return_uint8=return_uint8 and cam not in image_clips)
            depth = frames.dtype != torch.uint8  # LeRobot applies no image transform to depth maps
            sample[cam] = image_transforms(img) if image_transforms is not None and not depth else img
        values = dict(decoded_images(p.sample_values(), p.images))
        finish_images(values, p.images, image_transforms, batched=False)  # before value_tensors: numpy views
        sample.update(value_tensors(values))
        out.append(image_clips.apply(sample))
        for clip in p.release:
            decoders.release(clip)
    return out
