"""The synthetic dataset's mp4 files, written as LeRobot writes them: episodes of one camera appended to the current
file until it passes ``video_files_size_in_mb``, then the next file, file indices rolling over into chunks."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from roboreel.formats import lerobot_v3_layout as v3
from roboreel.synth.config import SynthConfig

_COMPRESSION_ESTIMATE = 25.0  # yuv420p bytes / encoded bytes assumed when rolling video files over


class Roller:
    """Chunk/file indices that roll over like LeRobot's: file_index wraps at chunks_size into the next chunk."""

    def __init__(self, chunks_size: int) -> None:
        self.chunks_size, self.chunk, self.file = chunks_size, 0, 0

    def next(self) -> None:
        self.file += 1
        if self.file >= self.chunks_size:
            self.chunk, self.file = self.chunk + 1, 0


class VideoFileWriter:
    """Appends episodes of one camera to the current mp4 until it passes the size limit, then starts the next."""

    def __init__(self, root: Path, key: str, cfg: SynthConfig, *, depth: bool = False) -> None:
        self.root, self.key, self.cfg, self.depth = root, key, cfg, depth
        self.roller = Roller(cfg.chunks_size)
        self.container = None
        self.files = 0

    def _open(self) -> None:
        rel = v3.DEFAULT_VIDEO_PATH.format(video_key=self.key, chunk_index=self.roller.chunk, file_index=self.roller.file)
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        self.container = av.open(str(path), "w", format="mp4")
        if self.depth:  # LeRobot's depth writer: lossless HEVC gray12le, g=2 (synth/depth.py)
            stream = self.container.add_stream("libx265", rate=self.cfg.fps)
            stream.width, stream.height, stream.pix_fmt = self.cfg.width, self.cfg.height, "gray12le"
            stream.codec_tag = "hvc1"
            stream.options = {"g": "2", "x265-params": "lossless=1:log-level=error:open-gop=0"}
            self.stream, self.n = stream, 0
            self.files += 1
            return
        stream = self.container.add_stream(self.cfg.codec, rate=self.cfg.fps)
        stream.width, stream.height, stream.pix_fmt = self.cfg.width, self.cfg.height, self.cfg.pix_fmt
        opts = {"g": str(self.cfg.g), "crf": str(self.cfg.crf)}
        if self.cfg.codec == "libsvtav1":
            if self.cfg.preset is not None:
                opts["preset"] = str(self.cfg.preset)
            # One encoder thread: with SVT-AV1's own thread pool, what came back when depended on the host's load,
            # and under heavy load a mux at the final flush failed now and then with EINVAL. A test fixture must
            # come out the same on every run; at the sizes tests use (64x48) one thread was no slower.
            opts["svtav1-params"] = "lp=1"
        # Episodes start closed GOPs (forced keyframes are IDRs), as in LeRobot's files, where each episode is
        # encoded on its own and concatenated: no frame of an episode references the previous one.
        if self.cfg.codec == "libx264":
            opts["forced-idr"] = "1"
        if self.cfg.codec == "libx265":
            opts["x265-params"] = f"log-level=error:open-gop={int(self.cfg.open_gop)}"
            stream.codec_tag = "hvc1"
        stream.options = opts
        self.stream, self.n = stream, 0
        self.files += 1

    @property
    def frame_bytes(self) -> float:
        """Estimated encoded bytes per frame. Rollover uses this, not the bytes muxed so far: how many packets
        an encoder has returned when an episode ends is its own business (lookahead, threads), and the file
        layout must not depend on it. Measured here at LeRobot's settings: ~19:1 at 64x64, ~37:1 at 224x224."""
        return self.cfg.width * self.cfg.height * 1.5 / _COMPRESSION_ESTIMATE

    def add_episode(self, frames: list[np.ndarray]) -> tuple[int, int, float, float]:
        """Encode one episode; returns (chunk_index, file_index, from_timestamp, to_timestamp)."""
        if self.container is None:
            self._open()
        loc = (self.roller.chunk, self.roller.file)
        start = self.n
        for k, arr in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(arr, format="gray12le" if self.depth else "rgb24")
            frame.pts, frame.time_base = self.n, Fraction(1, self.cfg.fps)
            if k == 0:
                frame.pict_type = av.video.frame.PictureType.I  # episodes start on a keyframe, as LeRobot's concat
            for packet in self.stream.encode(frame):
                self._mux(packet)
            self.n += 1
        span = (loc[0], loc[1], start / self.cfg.fps, self.n / self.cfg.fps)
        if self.n * self.frame_bytes >= self.cfg.video_files_size_in_mb * 1e6:
            self.close()
            self.roller.next()
        return span

    def _mux(self, packet: av.Packet) -> None:
        if self.cfg.codec == "libsvtav1" and not self.depth and packet.pts is not None:
            # AV1 packets come in presentation order (no reordering), so dts = pts is always valid; it avoids an
            # intermittent "non monotonically increasing dts" EINVAL seen from SVT-AV1 under heavy load.
            packet.dts = packet.pts
        self.container.mux(packet)

    def close(self) -> None:
        if self.container is not None:
            for packet in self.stream.encode():
                self._mux(packet)
            self.container.close()
            self.container = None
