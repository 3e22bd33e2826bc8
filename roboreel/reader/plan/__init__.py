"""The plan room: which sample comes next, in which order, and how a run resumes. Pure functions of the index
and (seed, epoch, rank, worker); no I/O and no decoding.

- ``epoch``: shard order, the rank/worker split, each consumer's slices (``World``, ``Slice``).
- ``pool``: the episode pool's emission order (``PoolSchedule``) and the pending samples it turns into.
- ``requests``: what plan hands decode (``PendingSample``, ``FrameRequest``, ``EpisodeClip``,
  ``ImageRequest``).
- ``windows``: ``delta_timestamps`` -> frame offsets, clamping and ``*_is_pad`` (the sample contract).
- ``rows``: tabular columns as numpy, shaped like LeRobot's features.
- ``resume`` / ``state``: from "b batches received" to each worker's position; the saved state's format.

Imports only formats/ and itself: never decode/, fetch/ or the package face. Decode consumes plan's requests,
never the other way round.
"""
