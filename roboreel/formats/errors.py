"""Named errors for data faults: each carries the file and, where known, the episode, so a user at 100 TB can
find the bad bytes without a debugger."""

from __future__ import annotations


class RoboreelError(Exception):
    """Base class of every error roboreel raises on purpose."""


class DataError(RoboreelError):
    """Bad bytes at a known place: the message ends with the file and, where known, the episode."""

    def __init__(self, message: str, *, file: str | None = None, episode: int | None = None) -> None:
        where = []
        if file is not None:
            where.append(f"file {file}")
        if episode is not None:
            where.append(f"episode {episode}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.file = file
        self.episode = episode


class SourceError(DataError):
    """A LeRobot source dataset is malformed, inconsistent, unsupported or unreadable."""


class SourceReadError(SourceError):
    """Reading a source file kept failing with transient faults (timeouts, resets, 5xx, 429, truncated
    transfers) after the retry budget. The source is not known to be bad, so a compile keeps what it finished
    and a rerun resumes; a subclass so that ``except SourceError`` still catches it."""


class CompiledFormatError(DataError):
    """A compiled roboreel dataset (manifest or shard) is malformed, incomplete or fails its checksums, or a
    compile's self-check refused what it wrote. A sibling of SourceError, not a kind of it: ``except
    SourceError`` must not swallow a fault of the compiled output."""


class FrameTimestampError(RoboreelError):
    """A decoded frame's timestamp is further than tolerance_s from the one asked for.

    Built with keywords; a lone message (what pickling and torch's DataLoader do to carry an error out of a
    worker process) is accepted too, so the type survives process boundaries.
    """

    def __init__(
        self, message: str | None = None, *, video: str | None = None, episode: int | None = None,
        queried_s: float | None = None, loaded_s: float | None = None, tolerance_s: float | None = None,
    ) -> None:
        if message is None:
            if video is None or episode is None or queried_s is None or loaded_s is None or tolerance_s is None:
                raise TypeError("FrameTimestampError needs a message, or video, episode, queried_s, loaded_s and "
                                "tolerance_s")
            message = (
                f"frame at {loaded_s:.6f}s is {abs(loaded_s - queried_s):.6f}s from the queried {queried_s:.6f}s "
                f"(tolerance {tolerance_s}s) in {video}, episode {episode}"
            )
        super().__init__(message)
        self.video, self.episode = video, episode
        self.queried_s, self.loaded_s, self.tolerance_s = queried_s, loaded_s, tolerance_s


class ShardReadError(DataError):
    """Reading a shard kept failing (timeouts, resets, 5xx, truncated transfers) after the retry budget."""
