"""Deferred decode: workers ship compressed pending samples, the main process decodes whole batches.

Worker side (inside ``CompiledDataset.iter_pending`` and the DataLoader's ``collate_fn``):
- ``ship_once``: a clip's bytes travel with the first pending sample that needs it; later references carry an
  empty stub. A pooled clip (~1-3 MB per camera per 224x224 episode) is needed by many batches, so sending it
  with every batch would move tens of MB per batch through the worker pipe; sending it once moves each clip's
  bytes once per epoch, the same traffic as reading the shards.
- ``collate_pending``: a batch of pending samples becomes a ``PendingBatch``: image features decoded and the
  tabular values collated exactly as ``default_collate`` collates them in the CPU path, the clips it reads, per
  clip the frames it needs (deduplicated, with the timestamps they must show), per camera the (clip, frame) of
  every sample.

Main-process side (the decode stage of reader/loader/_loader.py, on a background thread):
- ``ClipStore`` keeps the shipped bytes of live clips until a batch says they were released.
- ``assemble`` decodes a batch (one sorted ``get_frames_at`` per clip and decoder lane, pts checked as in
  ``decode.materialize``) and builds the collated batch on the device: the CPU path's keys, order, shapes and
  dtypes. The arithmetic is the CPU path's too (``x / 255.0`` elementwise, transforms per sample), so on the CPU
  the batches are bit-identical to ``DataLoader(CompiledDataset)``'s.

The ship-once protocol needs the DataLoader's in-order delivery (its default): every batch of one worker arrives
in the order it was made, and each clip belongs to one worker's pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from roboreel.formats.errors import FrameTimestampError
from roboreel.formats.table_features import LANGUAGE_COLUMNS
from roboreel.reader.decode._images import NO_IMAGE_CLIPS, ImageClips, decoded_images, finish_images
from roboreel.reader.decode._unit import unit_float
from roboreel.reader.plan import EpisodeClip, PendingSample, Rows

ClipKey = tuple[str, int, str, int]  # EpisodeClip.key: shard, episode, camera, stream


def ship_once(pending: Iterator[PendingSample]) -> Iterator[PendingSample]:
    """Strip clip bytes from every reference but a clip's first (and from ``release``): see the module doc."""
    stubs: dict[ClipKey, EpisodeClip] = {}
    for p in pending:
        for req in p.video.values():
            key = req.clip.key
            stub = stubs.get(key)
            if stub is None:
                stubs[key] = EpisodeClip.stub(key)  # this sample carries the bytes
            else:
                req.clip = stub
        if p.release:
            p.release = tuple(stubs.pop(c.key, None) or EpisodeClip.stub(c.key) for c in p.release)
        yield p


@dataclass
class CameraPlan:
    """How one camera's tensor is built: ``refs`` = (clip, frame) per sample and window slot, sample-major."""

    stacked: bool  # [B, T, C, H, W] (a window of several offsets) or [B, C, H, W]
    window: int
    refs: list[tuple[ClipKey, int]] = field(default_factory=list)


@dataclass
class PendingBatch:
    """A collated batch before decoding (what a DataLoader worker sends to the main process)."""

    size: int
    values: dict[str, Any]  # every non-camera key, collated as default_collate does (tensors, ``task`` list)
    cameras: dict[str, CameraPlan]
    clips: dict[ClipKey, EpisodeClip]  # clips this batch reads; bytes only where this is their first shipment
    wanted: dict[ClipKey, tuple[dict[int, float], dict[int, int]]]  # clip -> {frame: queried_s}, {frame: lane}
    release: list[ClipKey]  # clips no later batch reads (their episode left the pool)
    produce_seconds: float = 0.0  # worker time spent producing these samples
    runs: dict[ClipKey, dict[int, int]] = field(default_factory=dict)  # clip -> {frame: its GOP run's end}
    images: Mapping[str, bool] = field(default_factory=dict)  # image features among values: PendingSample.images

    def __getstate__(self) -> dict[str, Any]:
        """Tabular tensors travel as numpy arrays, inline in the worker's pipe: a tensor would go through shared
        memory, one file descriptor and one socket round trip to the resource sharer per tensor (~3% of the
        training process's CPU at 480x640 for a dozen small tensors a batch)."""
        state = dict(self.__dict__)
        state["values"] = {k: _Inline(v.numpy()) if _inlinable(v) else v for k, v in self.values.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["values"] = {k: torch.from_numpy(v.array) if isinstance(v, _Inline) else v
                           for k, v in state["values"].items()}
        self.__dict__.update(state)

    def pin_memory(self) -> PendingBatch:
        """Pinned tabular tensors (DataLoader ``pin_memory=True`` calls this), for asynchronous copies."""
        self.values = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in self.values.items()}
        return self


@dataclass
class _Inline:
    """A tabular tensor's values on the way to the main process (``PendingBatch.__getstate__``)."""

    array: Any


def _inlinable(v: Any) -> bool:
    """A CPU tensor numpy can hold exactly (not bfloat16 and the like), not needing grad."""
    return (isinstance(v, torch.Tensor) and v.device.type == "cpu" and not v.requires_grad
            and v.dtype in _NUMPY_DTYPES)


_NUMPY_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                           torch.float16, torch.float32, torch.float64})


def collate_pending(items: Sequence[PendingSample | tuple[PendingSample, float]]) -> PendingBatch:
    """``collate_fn`` for pending samples (optionally paired with the seconds it took to produce them).

    Runs once per batch for every sample in the process that makes batches (a DataLoader worker, or the training
    process with ``num_workers=0``, where it holds the GIL the decode threads need), so the loop keeps per-sample
    work to dict lookups: a clip's key and its tables are looked up once per clip and batch, not made per sample."""
    samples = [it[0] if isinstance(it, tuple) else it for it in items]
    seconds = sum(it[1] for it in items if isinstance(it, tuple))
    if not samples:
        raise ValueError("collate_pending needs at least one pending sample")
    cameras: dict[str, CameraPlan] = {}
    clips: dict[ClipKey, EpisodeClip] = {}
    wanted: dict[ClipKey, tuple[dict[int, float], dict[int, int]]] = {}
    release: list[ClipKey] = []
    runs: dict[ClipKey, dict[int, int]] = {}
    for p in samples:
        for cam, req in p.video.items():
            clip = req.clip
            key = clip.key
            if clip.data or key not in clips:
                clips[key] = clip
            plan = cameras.get(cam)
            if plan is None:
                plan = cameras[cam] = CameraPlan(req.stacked, len(req.frames))
            elif plan.stacked != req.stacked or plan.window != len(req.frames):
                raise ValueError(f"camera {cam!r}: samples disagree on the window ({plan.window} vs "
                                 f"{len(req.frames)} frames); cannot collate")
            tables = wanted.get(key)
            if tables is None:
                tables = wanted[key] = ({}, {})
            queried, lanes = tables
            frames = req.frames.tolist()
            if req.run_end is not None:  # the rest of the run follows: decoded with it (_runs.py, the run cache)
                clip_runs = runs.get(key)
                if clip_runs is None:
                    clip_runs = runs[key] = {}
                clip_runs[frames[0]] = req.run_end
            refs = plan.refs
            if req.lanes is None:  # lane 0: a frame is asked at least there
                for f, q in zip(frames, req.queried_s.tolist(), strict=True):
                    queried[f] = q
                    lanes[f] = 0
                    refs.append((key, f))
            else:
                for f, q, lane in zip(frames, req.queried_s.tolist(), req.lanes.tolist(), strict=True):
                    queried[f] = q
                    lanes[f] = min(lane, lanes.get(f, lane))
                    refs.append((key, f))
        if p.release:
            release += [c.key for c in p.release]
    rows = [p.rows for p in samples if p.values is None and p.rows is not None]
    if len(rows) == len(samples):  # rows not gathered yet: one indexing per column and episode
        values = gather_values(rows)
    else:  # a sample with neither values nor rows raises here (sample_values), never drops out of the batch
        values = collate_values([decoded_images(p.sample_values(), p.images) for p in samples])
    return PendingBatch(len(samples), values, cameras, clips, wanted, release, seconds, runs,
                        samples[0].images)


def collate_values(values: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``default_collate`` of the samples' values, numeric ones stacked with numpy.

    Why not ``default_collate`` itself: in a DataLoader worker it stacks every tensor into a new shared-memory
    file (a file descriptor, ``ftruncate`` and ``mmap`` per key per batch), which ``PendingBatch`` then pickles
    inline anyway. Numeric arrays are stacked by ``np.array`` of their list: the shape, dtype (promoted alike) and
    values of ``np.stack`` (and of ``torch.stack`` of the tensors), in a tenth of its time for 32 small arrays
    (``np.stack`` expands and checks every array in Python); where ``np.array`` refuses (shapes differ) or would
    not give one numeric array, ``np.stack`` runs and names the mismatch. Every other value (``task`` strings,
    non-numeric columns) goes through ``default_collate`` as before, except LeRobot's language columns, kept as the
    list of the samples' values as ``lerobot_collate_fn`` keeps them (lerobot/utils/collate.py: lerobot-train's
    collate when ``meta.has_language_columns``)."""
    out: dict[str, Any] = {}
    for key in values[0]:
        column = [v[key] for v in values]
        first = column[0]
        if isinstance(first, np.ndarray) and first.dtype.kind in "biuf":
            out[key] = torch.from_numpy(_stack(column, first.ndim))
        elif key in LANGUAGE_COLUMNS:
            out[key] = column
        else:
            out[key] = default_collate(column)
    return out


def gather_values(rows: Sequence[Rows]) -> dict[str, Any]:
    """``collate_values`` of the samples' values, gathered from their episodes (``Rows.source.gather``) a column
    and an episode at a time instead of sample by sample: the same keys, order, dtypes and values. The episodes'
    parts are joined in episode order and put back in sample order by one permutation, computed once per batch.
    Samples whose episodes disagree on keys, dtypes or shapes (not within one dataset) take the per-sample path."""
    groups: dict[int, tuple[Any, list[int], list[int]]] = {}
    for i, r in enumerate(rows):
        g = groups.get(id(r.source))
        if g is None:
            g = groups[id(r.source)] = (r.source, [], [])
        g[1].append(i)
        g[2].append(r.frame)
    parts = [source.gather(np.asarray(frames, dtype=np.int64)) for source, _, frames in groups.values()]
    keys = list(parts[0])
    if any(list(part) != keys for part in parts[1:]):
        return collate_values([r.source.values(r.frame) for r in rows])
    # sample i's row is row ``order[i]`` of the parts joined in episode order
    order = None if len(parts) == 1 else np.argsort(
        np.fromiter((i for _, positions, _ in groups.values() for i in positions), dtype=np.int64, count=len(rows)))
    out: dict[str, Any] = {}
    for key in keys:
        got = [part[key] for part in parts]
        first = got[0]
        if isinstance(first, np.ndarray) and first.dtype.kind in "biuf":
            if order is None:
                out[key] = torch.from_numpy(first)
                continue
            if any(not isinstance(a, np.ndarray) or a.dtype != first.dtype or a.shape[1:] != first.shape[1:]
                   for a in got[1:]):
                return collate_values([r.source.values(r.frame) for r in rows])
            out[key] = torch.from_numpy(np.concatenate(got)[order])
        elif all(isinstance(a, list) for a in got):
            joined = [v for a in got for v in a]
            column = joined if order is None else [joined[i] for i in order.tolist()]
            out[key] = column if key in LANGUAGE_COLUMNS else default_collate(column)
        else:
            return collate_values([r.source.values(r.frame) for r in rows])
    return out


def _stack(column: list[Any], ndim: int) -> np.ndarray:
    """``np.stack(column)`` for arrays of ``ndim`` dimensions (see ``collate_values``)."""
    try:
        out = np.array(column)
    except ValueError:
        out = None
    if out is None or out.ndim != ndim + 1 or out.dtype.kind not in "biuf":
        out = np.stack(column)
    return out


class ClipStore:
    """Main-process side of ship-once: the bytes of every clip some worker still pools."""

    def __init__(self) -> None:
        self._clips: dict[ClipKey, EpisodeClip] = {}

    def admit(self, clips: dict[ClipKey, EpisodeClip]) -> None:
        for key, clip in clips.items():
            if clip.data:
                self._clips[key] = clip
            elif key not in self._clips:
                raise RuntimeError(f"clip {clip.name} arrived without its bytes and was never shipped before: "
                                   "the decode stage needs the DataLoader's in-order delivery (in_order=True)")

    def get(self, key: ClipKey) -> EpisodeClip:
        return self._clips[key]

    def release(self, key: ClipKey) -> EpisodeClip | None:
        return self._clips.pop(key, None)

    def clear(self) -> None:
        self._clips.clear()

    def __len__(self) -> int:
        return len(self._clips)

    @property
    def nbytes(self) -> int:
        return sum(len(c.data) for c in self._clips.values())


def assemble(
    batch: PendingBatch,
    decoders: Any,
    store: ClipStore,
    *,
    device: torch.device | str,
    tolerance_s: float,
    return_uint8: bool = False,
    image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
    image_clips: ImageClips = NO_IMAGE_CLIPS,
) -> dict[str, Any]:
    """Decode ``batch`` with ``decoders`` (ClipDecoders or DeviceDecoders) into the collated batch on ``device``;
    ``image_clips``: image features as LeRobot returns them (decode/_images.py)."""
    device = torch.device(device)
    store.admit(batch.clips)
    decoded: dict[ClipKey, dict[int, torch.Tensor]] = {}
    for key, (queried, lanes) in batch.wanted.items():
        clip = store.get(key)
        got = decoders.frames(clip, lanes, batch.runs.get(key))
        for f, (_, pts) in got.items():
            if not abs(pts - queried[f]) < tolerance_s:
                raise FrameTimestampError(video=clip.name, episode=clip.episode, queried_s=queried[f], loaded_s=pts,
                                          tolerance_s=tolerance_s)
        frames = {f: t for f, (t, _) in got.items()}
        if frames and next(iter(frames.values())).device != device:  # decoded on the CPU (fallback): one copy
            moved = torch.stack(list(frames.values())).to(device, non_blocking=True)
            frames = dict(zip(frames, moved.unbind(0), strict=True))
        decoded[key] = frames
    out: dict[str, Any] = {}
    for cam, plan in batch.cameras.items():
        x = torch.stack([decoded[key][f] for key, f in plan.refs])  # a fresh uint8 tensor [B * T, C, H, W]
        if plan.stacked:
            x = x.view(batch.size, plan.window, *x.shape[1:])
        if not return_uint8 or cam in image_clips:
            x = unit_float(x)  # as _clips.to_output: correctly rounded on the GPU too (_unit.py)
        if image_transforms is not None:
            x = torch.stack([image_transforms(s) for s in x])
        out[cam] = x
    for key, v in batch.values.items():
        out[key] = v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
    finish_images(out, batch.images, image_transforms, batched=True)
    for key in batch.release:
        clip = store.release(key)
        decoders.release(clip if clip is not None else EpisodeClip.stub(key))
    return out
