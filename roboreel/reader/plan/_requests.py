"""What plan hands decode: a ``PendingSample`` (tabular values + per camera a ``FrameRequest`` naming frames of
a compressed ``EpisodeClip``; an image feature's encoded images as an ``ImageRequest``).

The plan room (reader/plan/_pool.py) builds these and the decode room consumes them: decode imports this module,
plan imports nothing of decode, so a sample crosses from plan to decode once, one way. The values a sample has not
gathered yet (``Rows``) come from a ``RowSource``, plan's pooled episode: reading them is plan's arithmetic over
its rows (windows, padding, tasks), no decoding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(eq=False)
class EpisodeClip:
    """One camera's compressed clip of one episode: ``key`` identifies it for decoder reuse. ``stream`` tells
    apart the copies of one clip that two consumers (DataLoader workers) hold when the split cut its episode
    between them: each releases its own (reader/plan/_epoch.py)."""

    shard: str
    episode: int
    camera: str
    data: bytes
    stream: int = 0

    @property
    def key(self) -> tuple[str, int, str, int]:
        return (self.shard, self.episode, self.camera, self.stream)

    @classmethod
    def stub(cls, key: tuple[str, int, str, int]) -> EpisodeClip:
        """The clip named by ``key`` without its bytes (they travelled with an earlier reference)."""
        shard, episode, camera, stream = key
        return cls(shard, episode, camera, b"", stream)

    @property
    def name(self) -> str:
        return f"{self.shard}:{self.episode:06d}.{self.camera}.mp4"


@dataclass
class FrameRequest:
    """The frames one sample needs from one clip, in window order (repeats allowed, e.g. clamped edges)."""

    clip: EpisodeClip
    frames: np.ndarray  # int64 frame numbers within the clip (= frame_index within the episode)
    queried_s: np.ndarray  # float64: the timestamp each frame must show (the row's timestamp), for tolerance checks
    stacked: bool  # True -> [T, C, H, W]; False -> [C, H, W] (no window, or a one-offset window, as LeRobot)
    lanes: np.ndarray | None = None  # per frame, which of the clip's decoders should decode it (None: lane 0)
    run_end: int | None = None  # frames[0] + 1 .. run_end - 1 are asked next from this clip, in order, one each


@dataclass(frozen=True)
class ImageRequest:
    """An image feature's encoded images for one sample (one per window row; ``stacked``: a window, decoded to
    ``[T, H, W, C]``, else one image ``[H, W, C]``). ``metres``: a depth image stored in metres (LeRobot returns
    millimetres). ``name`` names the image in a decode error (shard, episode, key, frame)."""

    data: tuple[bytes, ...]
    stacked: bool
    metres: bool
    name: str


class RowSource(Protocol):
    """Where ungathered values come from (plan/pool.LoadedEpisode): one sample's, or many samples' at once."""

    def values(self, f: int) -> dict[str, Any]: ...

    def gather(self, frames: np.ndarray) -> dict[str, Any]: ...


@dataclass(eq=False)
class Rows:
    """A sample's tabular values before they are gathered: row ``frame`` of ``source``.

    ``source`` gathers the rows of many samples at once, ``gather(frames)``: one indexing per column for all of a
    batch's samples of that episode (decode/deferred.collate_pending), where gathering each sample's values and
    stacking them cost ~20 us a sample of the Python that holds the GIL the decode threads need; or one sample's,
    ``values(frame)``. Only episodes without image features gather this way (``LoadedEpisode.batched``)."""

    source: RowSource
    frame: int


@dataclass
class PendingSample:
    """A sample that has left the pool but is not decoded yet."""

    episode: int
    frame: int  # frame within the episode
    # every non-camera key in final order: numpy arrays (tabular, ``*_is_pad``), ``task``, image features as
    # ``ImageRequest`` (decoded by decode/_images.py); None while ``rows`` holds them ungathered (``sample_values``)
    values: dict[str, Any] | None
    video: dict[str, FrameRequest]  # camera key -> request, in camera order
    release: tuple[EpisodeClip, ...] = ()  # clips no later sample needs (their episode left the pool)
    # image features among ``values`` (decode/_images.py decodes and finishes them) -> whether image_transforms apply
    images: Mapping[str, bool] = field(default_factory=dict)
    rows: Rows | None = None

    def sample_values(self) -> dict[str, Any]:
        """The sample's values, gathered from ``rows`` on first use (then kept in ``values``)."""
        if self.values is None:
            if self.rows is None:
                raise ValueError(f"pending sample of episode {self.episode} frame {self.frame} has no values")
            self.values = self.rows.source.values(self.rows.frame)
        return self.values


MAX_LANES = 4


def window_lanes(num_offsets: int) -> np.ndarray:
    """Decoder lane of each offset of a camera window: adjacent offsets share one of at most MAX_LANES lanes."""
    return (np.arange(num_offsets) * min(num_offsets, MAX_LANES)) // num_offsets
