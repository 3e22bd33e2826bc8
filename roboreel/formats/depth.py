"""What a depth-map camera's bytes mean, as LeRobot 0.6.1 defines it (compile and reader both read this).

LeRobot writes a depth feature (``info["is_depth_map"]``, or the legacy ``video.is_depth_map``) as 12-bit codes
(``gray12le``, lossless HEVC by default) from a quantiser whose parameters sit in the feature's ``info``
(``video.depth_min`` / ``video.depth_max`` / ``video.shift`` in metres, ``video.use_log``; LeRobot's defaults when
absent). Its reader decodes each frame with PyAV as ``to_ndarray(format="gray12le")`` and dequantises
(``lerobot/datasets/depth_utils.py``, ``dequantize_depth``, torch path): ``code * scale + offset``, ``exp``,
``- shift``, clamped to ``[depth_min, depth_max]``, then for the default output unit ``"mm"`` ``* 1000``, rounded,
clamped to ``[0, 65535]``: a float32 ``[1, H, W]`` map in millimetres whatever unit the dataset recorded in. Its
stats are kept in the recorded ``info["depth_unit"]`` and rescaled to the output unit on load
(``LeRobotDatasetMetadata.rescale_depth_stats``).

There are only 4096 codes, so the reader dequantises through a table of them, computed with exactly LeRobot's
torch operations in LeRobot's order (``reader/decode/_depth.py``, ``code_table``: torch stays out of formats/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

DEPTH_PIX_FMT = "gray12le"  # what LeRobot decodes every depth frame to, and what a compiled depth clip holds
DEPTH_QMAX = 4095  # 12-bit codes
DEPTH_CHANNELS = 1
OUTPUT_UNIT = "mm"  # LeRobotDataset's default depth_output_unit
MM_PER_METRE = 1000.0
# LeRobot 0.6.1's defaults (lerobot/configs/video.py) when a feature's info leaves a parameter out
DEFAULT_DEPTH_MIN, DEFAULT_DEPTH_MAX, DEFAULT_DEPTH_SHIFT, DEFAULT_DEPTH_USE_LOG = 0.01, 10.0, 3.5, True


def is_depth(feature: dict[str, Any]) -> bool:
    """Whether a LeRobot feature is a depth map (LeRobot's ``depth_keys`` rule, legacy keys included)."""
    info = feature.get("info") or {}
    video_info = feature.get("video_info") or {}
    return bool(info.get("is_depth_map") or info.get("video.is_depth_map") or video_info.get("video.is_depth_map"))


def depth_keys(features: dict[str, dict[str, Any]]) -> list[str]:
    return [k for k, f in features.items() if is_depth(f)]


@dataclass(frozen=True)
class DepthQuant:
    """A depth feature's quantiser (metres), read from its ``info`` as LeRobot's ``DepthEncoderConfig`` does."""

    depth_min: float = DEFAULT_DEPTH_MIN
    depth_max: float = DEFAULT_DEPTH_MAX
    shift: float = DEFAULT_DEPTH_SHIFT
    use_log: bool = DEFAULT_DEPTH_USE_LOG

    def __post_init__(self) -> None:
        if self.use_log and not self.depth_min + self.shift > 0:
            raise ValueError(f"depth_min + shift must be positive for log quantisation, got {self}")

    @classmethod
    def from_feature(cls, feature: dict[str, Any]) -> DepthQuant:
        info = feature.get("info") or {}
        kw = {name: info[f"video.{name}"] for name in ("depth_min", "depth_max", "shift", "use_log")
              if info.get(f"video.{name}") is not None}
        return cls(**kw)


def stats_factor(feature: dict[str, Any]) -> float:
    """What a depth feature's stats are multiplied by to be in the output unit (mm), as LeRobot does on load."""
    unit = (feature.get("info") or {}).get("depth_unit")
    return MM_PER_METRE if unit == "m" else 1.0


def recorded_values(codes: np.ndarray, feature: dict[str, Any]) -> np.ndarray:
    """float32 depths in the unit the dataset recorded (``info["depth_unit"]``) for 12-bit ``codes``: LeRobot's
    dequantisation in numpy (float32 rounding may differ from its torch path in the last bit; this serves stats,
    which LeRobot itself computes from the recorded values before quantisation, never the reader)."""
    q = DepthQuant.from_feature(feature)
    if q.use_log:
        lo, hi = math.log(q.depth_min + q.shift), math.log(q.depth_max + q.shift)
    else:
        lo, hi = q.depth_min, q.depth_max
    metres = codes.astype(np.float32) * np.float32((hi - lo) / DEPTH_QMAX) + np.float32(lo)
    if q.use_log:
        metres = np.exp(metres) - np.float32(q.shift)
    metres = np.clip(metres, q.depth_min, q.depth_max).astype(np.float32)
    if (feature.get("info") or {}).get("depth_unit") == "m":
        return metres
    return np.round(metres * np.float32(MM_PER_METRE)).astype(np.float32)
