"""Decode one episode's span of a (shared) source mp4, frame-exact, reusing one decoder per file.

Frame selection follows LeRobot: a decoded frame at ``pts_s`` is episode frame ``round((pts_s - from_ts) * fps)``
(float sums like 3.3 + 0.05 land just below a frame's pts, so "the frame shown at t" semantics would shift
frames). Every frame 0..length-1 must appear exactly once and in order, within LeRobot's tolerance_s (1e-4 s) of
``from_ts + k / fps``, or the span is refused with an error naming the file and episode: a clip never silently
loses, repeats or shifts a frame, nor holds one LeRobotDataset refuses to read.

Episodes of one mp4 are usually visited in file order, so a span that starts just after the last one read
continues decoding without a seek; otherwise the reader seeks to the keyframe before the span.

A remote mp4 is read through the source's file (a RetryingFile when the source retries: transient faults are
retried below FFmpeg, which reads on at the same byte). When its reads fail for good, FFmpeg may report that as a
corrupt or short video; the file's own error is raised instead, so a network fault is never blamed on the data.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import av

from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.lerobot_v3_layout import TIMESTAMP_TOLERANCE_S
from roboreel.formats.transient import describe

log = logging.getLogger(__name__)

_CONTINUE_MAX_GAP_S = 2.0  # decode forward instead of seeking when the next span starts this close ahead


@dataclass
class SpanPackets:
    """The compressed packets of one span (decode order) and whether they stand alone as a closed sequence."""

    packets: list[av.Packet]
    first_pts: int | None = None
    closed: bool = True  # False when a packet from outside the span sits between the span's packets


class SourceVideo:
    """One source mp4 opened for span reads. Not thread-safe; one per worker process and file.

    ``keep_packets`` buffers demuxed packets since the last seek, so ``frames(..., packets=...)`` can hand a
    span's compressed packets to a stream copy even when the decoder read some of them during the previous span.
    """

    def __init__(
        self, source: LeRobotSource, rel: str, *, fps: int, threads: int = 0, keep_packets: bool = False,
        episode: int | None = None,
    ) -> None:
        self.rel, self.fps, self.keep_packets = rel, fps, keep_packets
        self._file: Any = None
        self.container: Any = None
        try:
            protocol = source.fs.protocol
            if "file" in (protocol if isinstance(protocol, tuple) else (protocol,)):
                target: Any = source.path(rel)  # local: let FFmpeg read the file itself (no GIL round trips)
                if not source.fs.exists(target):
                    raise SourceError("missing video file", file=rel, episode=episode)
            else:
                self._file = target = source.open(rel, episode=episode)
            self.container = av.open(target, "r")
            if not self.container.streams.video:
                raise SourceError("mp4 has no video stream", file=rel, episode=episode)
            if len(self.container.streams.video) > 1:  # which one LeRobot reads is torchcodec's FFmpeg's choice
                raise SourceError(f"mp4 holds {len(self.container.streams.video)} video streams; a LeRobot camera "
                                  "file holds one (rewrite it with only the camera's stream)", file=rel,
                                  episode=episode)
        except SourceError:
            self.close()
            raise
        except (av.error.FFmpegError, OSError) as e:
            read_error = self._read_error(episode)
            self.close()
            if read_error is not None:
                raise read_error from (read_error.__cause__ or e)
            raise SourceError(f"cannot open video (corrupt or truncated mp4?): {e}", file=rel, episode=episode) from e
        self.stream = self.container.streams.video[0]
        self.ctx = self.stream.codec_context
        self.ctx.thread_count = threads
        self.codec = self.ctx.codec.canonical_name  # "av1", "hevc", "h264", ... (decoder-independent)
        self.time_base = self.stream.time_base
        self._pending: deque[av.VideoFrame] = deque()
        self._demux: Iterator[av.Packet] | None = None
        self._eof = False
        self._last_s: float | None = None  # pts (s) of the last frame handed out
        self._pos = 0  # decode-order position of the next demuxed packet since the last seek
        self._buf: list[tuple[int, av.Packet]] = []

    def _read_error(self, episode: int) -> SourceError | None:
        """What ended the remote file's reads, if they failed (RetryingFile.failed) while FFmpeg read them."""
        failed = getattr(self._file, "failed", None)
        if failed is None or isinstance(failed, SourceError):
            return failed
        error = SourceError(f"cannot read the video: {describe(failed)}", file=self.rel, episode=episode)
        error.__cause__ = failed
        return error

    def _blame(self, e: Exception, message: str, episode: int) -> NoReturn:
        """Raise the remote file's read error if its reads failed (FFmpeg may have reported that as ``e``), else
        SourceError(``message``) from ``e``."""
        read_error = self._read_error(episode)
        if read_error is not None:
            raise read_error from (read_error.__cause__ or e)
        raise SourceError(message, file=self.rel, episode=episode) from e

    def close(self) -> None:
        if self.container is not None:
            self.container.close()
            self.container = None
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- low level ------------------------------------------------------------------------------------
    def _seek(self, start_s: float, episode: int) -> None:
        target = max(0.0, start_s - 0.5 / self.fps)
        try:
            self.container.seek(int(target / self.time_base), stream=self.stream, backward=True, any_frame=False)
            self.ctx.flush_buffers()
        except av.error.FFmpegError as e:
            self._blame(e, f"cannot seek to {start_s:.6f}s: {e}", episode)
        self._demux = self.container.demux(self.stream)
        self._pending.clear()
        self._buf.clear()
        self._eof, self._last_s, self._pos = False, None, 0

    def _next_frame(self, episode: int) -> av.VideoFrame | None:
        while not self._pending:
            if self._eof or self._demux is None:
                return None
            try:
                packet = next(self._demux, None)
                if packet is None or packet.size == 0:
                    self._eof = True
                    frames = self.ctx.decode(None)
                else:
                    if self.keep_packets:
                        self._buf.append((self._pos, packet))
                    self._pos += 1
                    frames = self.ctx.decode(packet)
            except av.error.FFmpegError as e:
                self._blame(e, f"cannot decode video (corrupt mp4?): {e}", episode)
            self._pending.extend(frames)
        return self._pending.popleft()

    # -- spans ----------------------------------------------------------------------------------------
    def frames(
        self, from_s: float, length: int, *, episode: int, packets: SpanPackets | None = None
    ) -> Iterator[av.VideoFrame]:
        """Yield the span's ``length`` frames in order (frame k = episode frame k), or raise SourceError.

        With ``packets`` (needs ``keep_packets``), also fill it with the span's compressed packets once the
        generator is exhausted.
        """
        if packets is not None and not self.keep_packets:
            raise ValueError("packets=... needs SourceVideo(keep_packets=True)")
        if hasattr(self._file, "episode"):
            self._file.episode = episode  # named if the remote file's reads fail for good
        if not (self._last_s is not None and 0 < from_s - self._last_s <= _CONTINUE_MAX_GAP_S):
            self._seek(from_s, episode)
        expected, retried = 0, False
        while expected < length:
            frame = self._next_frame(episode)
            if frame is None:
                read_error = self._read_error(episode)
                if read_error is not None:
                    raise read_error
                raise SourceError(
                    f"video ends after {expected} of the episode's {length} frames "
                    f"(span {from_s:.6f}s..{from_s + length / self.fps:.6f}s): the video is shorter than its span",
                    file=self.rel, episode=episode,
                )
            if frame.pts is None:
                raise SourceError("decoded frame has no timestamp", file=self.rel, episode=episode)
            t = float(frame.pts * self.time_base)
            k = round((t - from_s) * self.fps)
            if k < 0:
                continue
            if k > 0 and expected == 0 and not retried:
                # The seek landed past the span's start (a sparse or odd index): decode from the file's start.
                retried = True
                self._seek(0.0, episode)
                continue
            if k != expected:
                self._pending.appendleft(frame)
                self._last_s = None  # force a seek next time: the decoder position is no longer trusted
                raise SourceError(
                    f"video {'repeats' if k < expected else 'skips'} frames: expected episode frame {expected} at "
                    f"{from_s + expected / self.fps:.6f}s, decoded frame {k} at {t:.6f}s",
                    file=self.rel, episode=episode,
                )
            if expected == 0 and frame.rotation:
                raise SourceError(
                    f"the video carries a display rotation of {frame.rotation} degrees: LeRobot (torchcodec) returns "
                    "its frames rotated, which a compiled clip does not carry; rewrite the video with the rotation "
                    "applied to its pixels", file=self.rel, episode=episode,
                )
            off = t - (from_s + k / self.fps)
            if abs(off) >= TIMESTAMP_TOLERANCE_S:
                self._last_s = None
                raise SourceError(
                    f"episode frame {k} is at {t:.6f}s, {off * 1e3:+.3f} ms from its timestamp "
                    f"{from_s + k / self.fps:.6f}s (from_timestamp + frame_index / fps): LeRobot reads a frame only "
                    f"within tolerance_s={TIMESTAMP_TOLERANCE_S:g}s of it, so LeRobotDataset cannot read this "
                    "sample; rewrite the video with frame k at from_timestamp + k/fps",
                    file=self.rel, episode=episode,
                )
            self._last_s = t
            expected += 1
            yield frame
        if packets is not None:
            self._take_packets(packets, from_s, length)
        else:  # nobody wants this span's packets (keep memory bounded); those demuxed past it belong to the next
            end = from_s + (length - 0.5) / self.fps
            self._buf = [(pos, p) for pos, p in self._buf if p.pts is not None and float(p.pts * self.time_base) > end]

    def _take_packets(self, out: SpanPackets, from_s: float, length: int) -> None:
        """Move the span's packets out of the buffer and check they form one closed run starting on a keyframe."""
        inside: list[av.Packet] = []
        positions: list[int] = []
        for pos, p in self._buf:
            if p.pts is None:
                continue
            k = round((float(p.pts * self.time_base) - from_s) * self.fps)
            if 0 <= k < length:
                inside.append(p)
                positions.append(pos)
        out.packets = inside
        if not inside:
            out.closed = False
            return
        out.first_pts = min(p.pts for p in inside)
        # Contiguous in decode order (no packet of another span between) and starting on a keyframe: then the
        # run decodes on its own. The caller still verifies the copy decodes to the same pixels.
        contiguous = positions == list(range(positions[0], positions[0] + len(positions)))
        out.closed = len(inside) == length and contiguous and bool(inside[0].is_keyframe)
        last = positions[-1]
        self._buf = [(pos, p) for pos, p in self._buf if pos > last]
