"""The plan room: which sample comes next, in which order, and how a run resumes. Pure functions of the index
and (seed, epoch, rank, worker); no I/O and no decoding.

- ``_epoch``: shard order, the rank/worker split, each consumer's slices (``World``, ``Slice``).
- ``_pool``: the episode pool's emission order (``PoolSchedule``) and the pending samples it turns into.
- ``_requests``: what plan hands decode (``PendingSample``, ``FrameRequest``, ``EpisodeClip``,
  ``ImageRequest``).
- ``_windows``: ``delta_timestamps`` -> frame offsets, clamping and ``*_is_pad`` (the sample contract).
- ``_rows``: tabular columns as numpy, shaped like LeRobot's features.
- ``_resume`` / ``_state``: from "b batches received" to each worker's position; the saved state's format.

Imports only formats/ and itself: never decode/, fetch/ or the package face. Decode consumes plan's requests,
never the other way round.
"""

from roboreel.reader.plan._episode_cache import EpisodeCache, auto_budget
from roboreel.reader.plan._epoch import (
    Selection,
    Slice,
    SplitOptions,
    World,
    consumer_range,
    consumer_slices,
    detect_rank,
    detect_worker,
    rank_samples,
    selection,
    stream_arrays,
    take,
    uneven_split_message,
    worker_quotas,
)
from roboreel.reader.plan._frames import frame_offsets
from roboreel.reader.plan._pool import (
    FRAME_ORDERS,
    EpisodeSpec,
    FrameOrder,
    LoadedEpisode,
    PoolSchedule,
    ScheduleKey,
    pending_samples,
    still_needed,
)
from roboreel.reader.plan._requests import (
    EpisodeClip,
    FrameRequest,
    ImageRequest,
    PendingSample,
    Rows,
    window_lanes,
)
from roboreel.reader.plan._resume import worker_batches
from roboreel.reader.plan._rows import column_array
from roboreel.reader.plan._shuffled import DEFAULT_SPREAD, MAX_RUNS, make_schedule
from roboreel.reader.plan._state import STATE_FORMAT, STATE_VERSION, checked_state, loader_state, resume_point
from roboreel.reader.plan._windows import delta_offsets, window

__all__ = [
    "DEFAULT_SPREAD", "EpisodeCache", "EpisodeClip", "EpisodeSpec", "FRAME_ORDERS", "FrameOrder",
    "FrameRequest", "ImageRequest", "LoadedEpisode", "MAX_RUNS", "PendingSample", "PoolSchedule", "Rows",
    "STATE_FORMAT", "STATE_VERSION", "ScheduleKey", "Selection", "Slice", "SplitOptions", "World",
    "auto_budget", "checked_state", "column_array", "consumer_range", "consumer_slices", "delta_offsets",
    "detect_rank", "detect_worker", "frame_offsets", "loader_state", "make_schedule", "pending_samples",
    "rank_samples", "resume_point", "selection", "still_needed", "stream_arrays", "take",
    "uneven_split_message", "window", "window_lanes", "worker_batches", "worker_quotas",
]
