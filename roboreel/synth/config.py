"""What ``roboreel synth`` generates: ``SynthConfig``.

Its own module, below both the generator (generate.py) and the video writer (videofile.py) that read it, so
neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_CAMERAS = ("observation.images.top", "observation.images.wrist")
# The encoder that writes each codec (``roboreel synth --codec`` names the codec, as ``roboreel compile`` does).
ENCODERS = {"av1": "libsvtav1", "hevc": "libx265", "h264": "libx264"}


@dataclass(frozen=True)
class SynthConfig:
    """What to generate. Lengths vary per episode, drawn from [min_length, max_length] by ``seed``."""

    episodes: int = 6
    min_length: int = 20
    max_length: int = 40
    fps: int = 20
    cameras: tuple[str, ...] = DEFAULT_CAMERAS
    height: int = 64
    width: int = 64
    tasks: int = 3
    state_dim: int = 6
    action_dim: int = 6
    seed: int = 0
    codec: str = "libsvtav1"  # LeRobot's default; "libx265"/"libx264" make HEVC/H.264 sources
    crf: int = 30
    g: int = 2
    # libsvtav1 speed preset. 10, not the fastest 12: at 224x224, preset 12 at crf 30 blurs inter frames to
    # 23-29 dB and breaks ~10% of pixel codes; 10 breaks none for ~10% more synth time (measured).
    preset: int | None = 10
    video_files_size_in_mb: float = 0.02  # roll over past this estimated size (see videofile.VideoFileWriter.frame_bytes)
    data_files_size_in_mb: float = 0.01
    chunks_size: int = 1000
    row_groups: str = "episode"  # "episode": one per episode (LeRobot >= #3807); "file": one per file (older)
    robot_type: str = "synth"
    pix_fmt: str = "yuv420p"  # RGB cameras' pixel format, e.g. "yuv420p10le" for a 10-bit source (x265/x264)
    open_gop: bool = False  # libx265 only: x265's default open GOPs (LeRobot's vcodec="hevc"), not closed ones
    depth_cameras: tuple[str, ...] = ()  # depth cameras written as LeRobot writes them (synth/depth.py)
    depth_unit: str = "mm"  # what the depth cameras record: "mm" (uint16) or "m" (float32)
    # False: cameras are image features, PNGs embedded in the data parquet (LeRobot's use_videos=False)
    use_videos: bool = True
    # True: a per-frame string feature and LeRobot's language_persistent / language_events columns (synth/tables.py)
    language: bool = False

    def lengths(self) -> list[int]:
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0x1E6]))
        return [int(x) for x in rng.integers(self.min_length, self.max_length + 1, size=self.episodes)]
