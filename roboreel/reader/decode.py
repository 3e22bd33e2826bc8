"""Decode on exit: turn pending samples (tabular values + which frames of which compressed clip) into samples.

The pool never holds pixels. A ``PendingSample`` names, per camera, a ``Clip`` (identity + compressed bytes) and
the clip frame numbers its window needs; ``materialize`` decodes a list of pending samples with one batched,
sorted ``get_frames_at`` call per clip, checks each frame's pts against the timestamp it should show, and builds
the LeRobot-shaped dicts. ``ClipDecoders`` keeps one torchcodec decoder per pooled clip, reused across samples
(clips are emitted mostly forward, so a reused decoder rarely seeks), and drops it when the pool releases the
clip, so memory stays bounded by the pool size.

Nothing here depends on where the pending samples came from or which device decodes: a GPU path can ship pending
samples from DataLoader workers to the main process and call ``materialize`` there with ``device="cuda"``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torchcodec.decoders import VideoDecoder  # loaded once in the parent, so forked workers inherit it

from roboreel.formats.errors import CompiledFormatError, FrameTimestampError

SeekMode = Literal["approximate", "exact"]
SEEK_MODES = ("approximate", "exact")


@dataclass(eq=False)
class Clip:
    """One camera's compressed clip of one episode: ``key`` identifies it for decoder reuse."""

    shard: str
    episode: int
    camera: str
    data: bytes

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.shard, self.episode, self.camera)

    @property
    def name(self) -> str:
        return f"{self.shard}:{self.episode:06d}.{self.camera}.mp4"


@dataclass
class FrameRequest:
    """The frames one sample needs from one clip, in window order (repeats allowed, e.g. clamped edges)."""

    clip: Clip
    frames: np.ndarray  # int64 frame numbers within the clip (= frame_index within the episode)
    queried_s: np.ndarray  # float64: the timestamp each frame must show (the row's timestamp), for tolerance checks
    stacked: bool  # True -> [T, C, H, W]; False -> [C, H, W] (no window, or a one-offset window, as LeRobot)
    lanes: np.ndarray | None = None  # per frame, which of the clip's decoders should decode it (None: lane 0)


@dataclass
class PendingSample:
    """A sample that has left the pool but is not decoded yet."""

    episode: int
    frame: int  # frame within the episode
    values: dict[str, Any]  # every non-camera key in final order: tabular tensors, ``*_is_pad``, ``task``
    video: dict[str, FrameRequest]  # camera key -> request, in camera order
    release: tuple[Clip, ...] = ()  # clips no later sample needs (their episode left the pool)


@dataclass
class DecodeStats:
    decode_seconds: float = 0.0
    decoder_opens: int = 0
    decoder_reuses: int = 0
    decode_calls: int = 0
    frames_decoded: int = 0


MAX_LANES = 4


def window_lanes(num_offsets: int) -> np.ndarray:
    """Decoder lane of each offset of a camera window: adjacent offsets share one of at most MAX_LANES lanes."""
    return (np.arange(num_offsets) * min(num_offsets, MAX_LANES)) // num_offsets


@dataclass
class ClipDecoders:
    """torchcodec decoders for live clips, created from the in-memory bytes on first use and reused.

    A clip's frames leave the pool mostly in forward order, so a reused decoder rarely seeks. A camera window
    (say ``[-1 s, 0]``) asks for frames at several distances from the current one; one decoder serving them all
    would jump back to a keyframe for every sample. So each offset of a window gets its own *lane* (a decoder of
    the same clip), and each lane moves forward on its own (measured at GOP 10, 224x224: [-1 s, 0] from 340 to
    1,700 samples/s). ``keep`` (camera -> frames) additionally holds the last few decoded frames of a windowed
    camera's clips, least recently used out first, since neighbouring samples share window frames.

    Memory: ``episode_pool_size x cameras`` decoders (x lanes for windowed cameras), released with their
    episode; ``max_open`` is a safety bound (least recently used decoders closed beyond it).
    """

    device: str = "cpu"
    seek_mode: SeekMode = "approximate"
    max_open: int = 4096
    keep: dict[str, int] = field(default_factory=dict)
    stats: DecodeStats = field(default_factory=DecodeStats)
    _open: OrderedDict = field(default_factory=OrderedDict)
    _kept: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.seek_mode not in SEEK_MODES:
            raise ValueError(f"seek_mode must be one of {SEEK_MODES}, got {self.seek_mode!r}")

    def decoder(self, clip: Clip, lane: int = 0) -> Any:
        key = (clip.key, lane)
        dec = self._open.get(key)
        if dec is not None:
            self._open.move_to_end(key)
            self.stats.decoder_reuses += 1
            return dec
        dec = VideoDecoder(clip.data, seek_mode=self.seek_mode, device=self.device)
        self.stats.decoder_opens += 1
        self._open[key] = dec
        while len(self._open) > self.max_open:
            self._open.popitem(last=False)
        return dec

    def frames(self, clip: Clip, wanted: dict[int, int]) -> dict[int, tuple[torch.Tensor, float]]:
        """Frames of ``clip`` (frame -> lane to decode it on): frame -> (uint8 [C, H, W], pts in seconds)."""
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
            t0 = time.perf_counter()
            try:
                batch = self.decoder(clip, lane).get_frames_at(misses)
            except (RuntimeError, IndexError, ValueError) as e:
                raise CompiledFormatError(f"cannot decode frames {misses} of {clip.name}: {e}", file=clip.shard,
                                          episode=clip.episode) from e
            self.stats.decode_seconds += time.perf_counter() - t0
            self.stats.decode_calls += 1
            self.stats.frames_decoded += len(misses)
            for f, frame, pts in zip(misses, batch.data, batch.pts_seconds.tolist(), strict=True):
                out[f] = (frame, pts)
                if keep:  # a copy, so a kept frame does not pin the whole decoded batch
                    kept[f] = (frame.clone() if len(misses) > 1 else frame, pts)
            while len(kept) > keep:
                kept.popitem(last=False)
        return out

    def release(self, clip: Clip) -> None:
        for lane in range(MAX_LANES):
            self._open.pop((clip.key, lane), None)
        self._kept.pop(clip.key, None)

    def close(self) -> None:
        self._open.clear()
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._open)


def to_output(frames: torch.Tensor, *, return_uint8: bool) -> torch.Tensor:
    """A fresh tensor as the sample holds it: uint8, or float32 in [0, 1] computed as ``x / 255.0`` exactly like
    LeRobot (one pass: true division of uint8 by a Python float yields float32)."""
    return frames.clone() if return_uint8 else frames / 255.0


def materialize(
    batch: Sequence[PendingSample],
    decoders: ClipDecoders,
    *,
    tolerance_s: float,
    return_uint8: bool = False,
    image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[dict[str, Any]]:
    """Decode ``batch`` (one sorted call per clip) and return the sample dicts, cameras first (LeRobot's order)."""
    wanted: dict[tuple, tuple[Clip, dict[int, float], dict[int, int]]] = {}
    for p in batch:
        for req in p.video.values():
            _, frames, lanes = wanted.setdefault(req.clip.key, (req.clip, {}, {}))
            lane_of = req.lanes.tolist() if req.lanes is not None else [0] * len(req.frames)
            for f, q, lane in zip(req.frames.tolist(), req.queried_s.tolist(), lane_of, strict=True):
                frames[f] = q
                lanes[f] = min(lane, lanes.get(f, lane))
    decoded: dict[tuple, dict[int, tuple[torch.Tensor, float]]] = {}
    for key, (clip, frames, lanes) in wanted.items():
        got = decoders.frames(clip, lanes)
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
            img = to_output(frames, return_uint8=return_uint8)
            sample[cam] = image_transforms(img) if image_transforms is not None else img
        sample.update(p.values)
        out.append(sample)
        for clip in p.release:
            decoders.release(clip)
    return out
