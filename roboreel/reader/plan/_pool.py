"""The episode pool: which frame leaves next, and the pending samples it turns into.

``PoolSchedule`` is the whole emission order of one consumer's epoch as a pure function of the episode lengths
and (seed, epoch, rank, worker): it admits episodes in stream order until ``pool_size`` are live, picks a live
episode uniformly at random for every sample, and replaces an episode as soon as its last frame left. Knowing
only lengths (from the manifest), it can be replayed to any position without touching data, which is what makes
resume exact and cheap.

Within an episode, frames leave in ``frame_order``:
- ``"segments"`` (default): the episode is cut into runs of ``gop`` frames (the clips' keyframe interval),
  the runs are visited in a random order and each run front to back. A pooled episode's decoder then only moves
  forward inside a GOP, so every emitted frame costs about one decoded frame, as in sequential decode (measured:
  random single-frame access to a GOP-10 clip decodes ~5x slower). Batches still mix ``~pool_size`` episodes.
- ``"random"``: a full permutation of the episode's frames (more decoding per sample).
With ``shuffle=False`` episodes leave one after another in file order, frames in order.
``PoolSchedule.run_end`` says how far the current run goes, so the decoder can decode the rest of it in one call
and keep it until asked (decode.ClipDecoders, "run cache").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.shard import EpisodeRecord
from roboreel.formats.table_features import image_bytes, image_problem
from roboreel.reader.plan._epoch import TAG_FRAMES, TAG_POOL, Slice
from roboreel.reader.plan._requests import (
    MAX_LANES,
    EpisodeClip,
    FrameRequest,
    ImageRequest,
    PendingSample,
    Rows,
    window_lanes,
)
from roboreel.reader.plan._rows import column_array
from roboreel.reader.plan._windows import window

FrameOrder = Literal["shuffled", "segments", "random"]
FRAME_ORDERS = ("shuffled", "segments", "random")  # "shuffled": plan/_shuffled.py
_DRAWS = 4096


def episode_frame_order(frames: range, *, episode: int, seed: int, epoch: int, order: FrameOrder, gop: int,
                        shuffle: bool = True) -> list[int]:
    """The order in which an episode's ``frames`` (``range(length)``: all of them) leave the pool. GOP runs stay
    aligned to multiples of ``gop`` from frame 0 (the clips' GOPs) whatever the range."""
    start, stop = frames.start, frames.stop
    if not shuffle:
        return list(range(start, stop))
    rng = np.random.default_rng(np.random.SeedSequence([TAG_FRAMES, seed, epoch, episode]))
    if order == "random":
        return (start + rng.permutation(stop - start)).tolist()
    first = start // gop * gop
    starts = np.arange(first, stop, gop)
    starts = starts[rng.permutation(len(starts))]
    return [f for s in starts.tolist() for f in range(max(s, start), min(s + gop, stop))]


@dataclass(frozen=True)
class ScheduleKey:
    """What a schedule's random order is a function of, besides the episode lengths: the dataset's ``seed`` and
    ``epoch``, and the consumer (``rank``, ``worker``) whose pool draws it."""

    seed: int
    epoch: int
    rank: int = 0
    worker: int = 0


class PoolSchedule:
    """Emission order of one consumer: iterate for ``(position, frame, last)`` triples.

    ``position`` indexes the consumer's episode stream, ``frame`` is the frame within that episode, ``last`` says
    the episode has no frames left (its clips can be released).
    """

    def __init__(
        self,
        episodes: Sequence[int],
        lengths: Sequence[int],
        *,
        pool_size: int,
        shuffle: bool,
        key: ScheduleKey,
        frame_order: FrameOrder = "segments",
        gop: int = 10,
        ranges: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        if pool_size < 1:
            raise ValueError(f"episode_pool_size must be >= 1, got {pool_size}")
        if frame_order not in FRAME_ORDERS[1:]:
            raise ValueError(f"frame_order must be one of {FRAME_ORDERS[1:]} here, got {frame_order!r} "
                             "(\"shuffled\" is ShuffledSchedule, from make_schedule)")
        # int64 arrays, not lists: a consumer of a million-episode epoch holds 8 bytes a value, not ~36
        self.episodes = np.asarray(episodes, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        # frames [a, b) of each episode this consumer emits (plan.split may cut an episode between consumers)
        if ranges is None:
            self.starts, self.stops = np.zeros_like(self.lengths), self.lengths
        else:
            r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
            self.starts, self.stops = r[:, 0], r[:, 1]
        self.pool_size, self.shuffle = pool_size, shuffle
        self.key, self.frame_order, self.gop = key, frame_order, max(1, gop)
        self._rng = np.random.default_rng(
            np.random.SeedSequence([TAG_POOL, key.seed, key.epoch, key.rank, key.worker]))
        self._draws: list[float] = []
        self._d = 0
        self._slots: list[list[Any]] = []  # [position, frames, cursor]
        self.next_admit = 0
        self.emitted = 0
        self.total = int((self.stops - self.starts).sum())
        self.lane = 0  # decoder lane of the last pick's frame (ShuffledSchedule keeps several runs per episode)

    def _fill(self) -> None:
        while len(self._slots) < self.pool_size and self.next_admit < len(self.episodes):
            pos = self.next_admit
            a, b = int(self.starts[pos]), int(self.stops[pos])
            frames = episode_frame_order(range(a, b), episode=int(self.episodes[pos]), seed=self.key.seed,
                                         epoch=self.key.epoch, order=self.frame_order, gop=self.gop,
                                         shuffle=self.shuffle)
            self._slots.append([pos, frames, 0])
            self.next_admit += 1

    def __iter__(self) -> Iterator[tuple[int, int, bool]]:
        return self

    def __next__(self) -> tuple[int, int, bool]:
        self._fill()
        if not self._slots:
            raise StopIteration
        k = 0
        if self.shuffle:
            if self._d == len(self._draws):
                self._draws, self._d = self._rng.random(_DRAWS).tolist(), 0
            k = int(self._draws[self._d] * len(self._slots))
            self._d += 1
        slot = self._slots[k]
        frame = slot[1][slot[2]]
        slot[2] += 1
        last = slot[2] == len(slot[1])
        if last:
            self._slots.pop(k)
        self.emitted += 1
        return slot[0], frame, last

    def run_end(self, frame: int, length: int) -> int | None:
        """End (exclusive) of the run ``frame`` belongs to: its episode's next frames up to there leave right after
        it, in order, one each (GOP runs, or file order); with ``frame_order="random"`` just ``frame + 1``."""
        if self.shuffle and self.frame_order == "random":
            return frame + 1
        return min((frame // self.gop + 1) * self.gop, length)

    def skip(self, n: int) -> None:
        """Advance ``n`` picks without emitting them (replay for resume; about a microsecond each)."""
        for _ in range(n):
            next(self)

    def needed_positions(self) -> Sequence[int]:
        """Stream positions whose records the rest of the epoch needs, in order: live episodes, then all not yet
        admitted (a lazy sequence: no list of every position)."""
        return _Needed(sorted(s[0] for s in self._slots), range(self.next_admit, len(self.episodes)))


class _Needed(Sequence[int]):
    """``live + list(rest)`` without building the list."""

    def __init__(self, live: list[int], rest: range) -> None:
        self.live, self.rest = live, rest

    def __len__(self) -> int:
        return len(self.live) + len(self.rest)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self.live[i] if i < len(self.live) else self.rest[i - len(self.live)]

    def __iter__(self) -> Iterator[int]:
        yield from self.live
        yield from self.rest

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented


@dataclass(frozen=True, eq=False)
class EpisodeSpec:
    """What every pooled episode of one stream is made into, whatever its record: the feature columns it keeps
    (``tabular_keys``), its cameras, the ``delta_timestamps`` windows (key -> frame offsets) and the task names.

    Image features (``images``: key -> stored in metres, a depth image LeRobot scales to mm) stay encoded in the
    pool, one ``bytes`` per row; ``transformed``: the image keys ``image_transforms`` applies to (LeRobot skips
    depth maps)."""

    tabular_keys: Sequence[str]
    camera_keys: Sequence[str]
    windows: Mapping[str, np.ndarray]
    tasks: Mapping[int, str]
    images: Mapping[str, bool] = field(default_factory=dict)
    transformed: Sequence[str] = ()


class LoadedEpisode:
    """A pooled episode: its rows as numpy columns and its compressed clips (no pixels), as ``spec`` says.

    Image features stay encoded here; a sample's values name the ones it needs (``ImageRequest``), which decode/
    decodes with the sample's frames (in the process that makes the sample: a DataLoader worker), since a pool of
    decoded episodes would hold every frame as pixels.
    """

    def __init__(self, record: EpisodeRecord, *, shard: str, spec: EpisodeSpec, stream: int = 0) -> None:
        self.index, self.length, self.shard = record.index, record.length, shard
        tabular_keys, camera_keys, windows = spec.tabular_keys, spec.camera_keys, spec.windows
        self.images = dict(spec.images)
        self.finish = {k: k in spec.transformed for k in self.images}  # PendingSample.images: shared by every sample
        rows = record.rows
        if rows.num_rows != self.length:
            raise CompiledFormatError(f"record has {rows.num_rows} rows, its json says length {self.length}",
                                      file=shard, episode=self.index)
        missing = [k for k in tabular_keys if k not in rows.column_names]
        if missing:
            raise CompiledFormatError(f"record rows lack feature columns {missing}", file=shard, episode=self.index)
        self.columns = {k: self._image_column(rows, k) if k in self.images else column_array(rows.column(k), self.length, k)
                        for k in tabular_keys}
        fi = self.columns.get("frame_index")
        if isinstance(fi, np.ndarray) and not np.array_equal(fi, np.arange(self.length)):
            raise CompiledFormatError("rows are not frames 0..length-1 in order", file=shard, episode=self.index)
        self.numeric = frozenset(k for k, v in self.columns.items() if isinstance(v, np.ndarray))
        self.timestamps = np.asarray(self.columns["timestamp"], dtype=np.float64).reshape(self.length)
        self.clips: dict[str, EpisodeClip] = {}
        for cam in camera_keys:
            if cam not in record.clips:
                raise CompiledFormatError(f"record lacks the clip of camera {cam!r}", file=shard, episode=self.index)
            self.clips[cam] = EpisodeClip(shard, self.index, cam, record.clips[cam], stream)
        self.windows = windows
        self.lanes = {cam: window_lanes(len(windows[cam])) for cam in self.clips if cam in windows}
        task_index = self.columns.get("task_index")
        self.tasks = spec.tasks
        self._task_index = task_index
        self.nbytes = sum(len(c.data) for c in self.clips.values()) + rows.nbytes
        # values gathered per batch (``gather``) unless a sample needs its own work: image features are requested
        # per sample, a windowed non-numeric column is a list per sample
        self.batched = not self.images and all(k in self.numeric for k in self.columns if k in windows)

    def _image_column(self, rows: Any, key: str) -> list[bytes]:
        problem = image_problem(rows.column(key))
        if problem:
            raise CompiledFormatError(f"image feature {key!r} {problem}", file=self.shard, episode=self.index)
        return image_bytes(rows.column(key))

    def _image(self, key: str, rows: list[int], *, stacked: bool) -> ImageRequest:
        """The encoded images of ``key`` at ``rows``, for decode/ (``stacked``: a window, ``[T, C, H, W]`` once
        decoded, as LeRobot stacks table columns)."""
        col = self.columns[key]
        return ImageRequest(tuple(col[i] for i in rows), stacked, self.images[key],
                            f"{self.shard}: episode {self.index} {key!r} frame {rows[0]}")

    def pending(self, f: int, *, last: bool, run_end: int | None = None, lane: int = 0) -> PendingSample:
        """The pending sample of frame ``f`` (its frames named, nothing decoded). Its values are gathered later,
        with the rest of its batch (``PendingSample.rows``, ``gather``), where every column gathers in one
        indexing; an episode with image features (requested per sample) or a windowed non-numeric column gathers
        them now (``values``). ``run_end``: see ``PoolSchedule.run_end``; passed on to cameras without a window
        (decode.ClipDecoders). ``lane``: the schedule's run lane (plan/_shuffled.py): a run's frames decode on
        decoders of their own, ``MAX_LANES`` per run for a windowed camera."""
        video: dict[str, FrameRequest] = {}
        pads: dict[str, np.ndarray] = {}  # the windowed cameras' padding masks, handed to ``values``
        for cam, clip in self.clips.items():
            off = self.windows.get(cam)
            if off is None:
                lanes = np.array([lane]) if lane else None
                video[cam] = FrameRequest(clip, np.array([f]), self.timestamps[f:f + 1], False, lanes, run_end)
                continue
            q, pads[f"{cam}_is_pad"] = window(f, 0, self.length, off)
            lanes = self.lanes.get(cam)
            if lane and lanes is not None:
                lanes = lanes + lane * MAX_LANES
            video[cam] = FrameRequest(clip, q, self.timestamps[q], len(off) > 1, lanes)
        release = tuple(self.clips.values()) if last else ()
        if self.batched:
            return PendingSample(self.index, f, None, video, release, self.finish, Rows(self, f))
        return PendingSample(self.index, f, self.values(f, pads), video, release, self.finish)

    def values(self, f: int, camera_pads: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
        """Frame ``f``'s values: its window's rows gathered, ``*_is_pad`` masks, ``task``. Numeric values are numpy
        arrays: indexing numpy costs a fraction of a tensor index + clone, and workers collate them without torch's
        shared memory (deferred.collate_values). ``camera_pads``: the windowed cameras' masks where ``pending``
        already computed them (computed here otherwise)."""
        values: dict[str, Any] = {}
        pads: dict[str, np.ndarray] = dict(camera_pads or {})
        for key, col in self.columns.items():
            off = self.windows.get(key)
            if off is None:  # a copy (0-dim for a scalar column): a sample must not pin the episode's column
                if key in self.images:
                    values[key] = self._image(key, [f], stacked=False)
                else:
                    values[key] = np.array(col[f]) if key in self.numeric else col[f]
            else:
                q, pad = window(f, 0, self.length, off)
                if key in self.images:  # [T, C, H, W] for any window, as LeRobot stacks table columns
                    values[key] = self._image(key, q.tolist(), stacked=True)
                else:
                    values[key] = col[q] if key in self.numeric else [col[i] for i in q.tolist()]
                pads[f"{key}_is_pad"] = pad
        for cam in self.clips:
            off = self.windows.get(cam)
            if off is not None and f"{cam}_is_pad" not in pads:
                pads[f"{cam}_is_pad"] = window(f, 0, self.length, off)[1]
        for key in self.windows:  # padding keys in delta_timestamps order, like LeRobot
            values[f"{key}_is_pad"] = pads[f"{key}_is_pad"]
        if self._task_index is not None:
            values["task"] = self.tasks[int(self._task_index[f])]
        return values

    def gather(self, frames: np.ndarray) -> dict[str, Any]:
        """The values of the samples at ``frames`` (int64), each key gathered for all of them at once, in ``values``'
        key order: numeric ones as arrays ``[len(frames), ...]`` (``np.stack`` of the samples' values: same dtype,
        shape and numbers), the others as lists of the samples' values. Only where ``batched`` (no image features,
        windowed columns numeric)."""
        out: dict[str, Any] = {}
        last = self.length - 1
        for key, col in self.columns.items():
            off = self.windows.get(key)
            if key in self.numeric:
                out[key] = col[frames] if off is None else col[np.clip(frames[:, None] + off, 0, last)]
            else:
                out[key] = [col[i] for i in frames.tolist()]
        for key, off in self.windows.items():  # padding keys in delta_timestamps order, like LeRobot
            raw = frames[:, None] + off
            out[f"{key}_is_pad"] = (raw < 0) | (raw > last)
        if self._task_index is not None:
            out["task"] = [self.tasks[int(t)] for t in self._task_index[frames].tolist()]
        return out


def pending_samples(
    schedule: PoolSchedule,
    records: Iterator[LoadedEpisode],
) -> Iterator[PendingSample]:
    """Follow ``schedule``, pulling records (in stream order, needed positions only) as it admits them."""
    needed = iter(schedule.needed_positions())
    live: dict[int, LoadedEpisode] = {}
    for pos, frame, last in schedule:
        ep = live.get(pos)
        while ep is None:
            p = next(needed)
            try:
                loaded = next(records)
            except StopIteration:
                raise CompiledFormatError(f"stream ended before episode {schedule.episodes[p]}",
                                          episode=int(schedule.episodes[p])) from None
            if loaded.index != schedule.episodes[p]:
                raise CompiledFormatError(f"stream gave episode {loaded.index}, expected {schedule.episodes[p]}",
                                          file=loaded.shard, episode=loaded.index)
            live[p] = loaded
            ep = live.get(pos)
        yield ep.pending(frame, last=last, run_end=schedule.run_end(frame, int(schedule.stops[pos])),
                         lane=schedule.lane)
        if last:
            del live[pos]


def still_needed(slices: list[Slice], schedule: PoolSchedule) -> list[Slice]:
    """The slices narrowed to the episodes the rest of the epoch needs (all of them unless resuming): live ones
    and every one not yet admitted. Whole slices past the resume point are kept as they are."""
    live = {p for p in schedule.needed_positions().live}
    first = schedule.next_admit
    out, at = [], 0
    for s in slices:
        n = len(s.episodes)
        if at >= first:
            out.append(s)
        else:
            eps = tuple(int(s.episodes[i]) for i in range(n) if at + i >= first or at + i in live)
            if eps:
                out.append(Slice(s.shard, eps))
        at += n
    return out
