"""A synthetic depth camera written as LeRobot 0.6.1 writes one (formats/depth.py): depth in millimetres (uint16)
or metres (float32), log-quantised to 12-bit codes with LeRobot's default parameters, lossless HEVC ``gray12le``
(x265 ``lossless=1``), g=2, and the feature's ``info`` LeRobot records (``is_depth_map``, ``depth_unit``,
``video.depth_min`` ...).

Depth values identify their frame: pixel (y, x) of global frame ``index`` is
``400 + (index * 37 + y * 7 + x * 11) % 1100`` mm, so a test holds any read against the codes it must be.
"""

from __future__ import annotations

import math

import numpy as np

from roboreel.formats.depth import (
    DEFAULT_DEPTH_MAX,
    DEFAULT_DEPTH_MIN,
    DEFAULT_DEPTH_SHIFT,
    DEFAULT_DEPTH_USE_LOG,
    DEPTH_PIX_FMT,
    DEPTH_QMAX,
    MM_PER_METRE,
)


def render_depth(index: int, height: int, width: int, unit: str = "mm") -> np.ndarray:
    """HW depth of global frame ``index``: uint16 millimetres, or float32 metres with ``unit="m"``."""
    yy, xx = np.mgrid[0:height, 0:width]
    mm = (400 + (index * 37 + yy * 7 + xx * 11) % 1100).astype(np.uint16)
    return mm if unit == "mm" else (mm.astype(np.float32) / np.float32(MM_PER_METRE))


def quantize(depth: np.ndarray) -> np.ndarray:
    """12-bit codes of a depth map, as LeRobot's ``quantize_depth`` with its defaults (unit from the dtype)."""
    unit_scale = 1.0 if np.issubdtype(depth.dtype, np.floating) else MM_PER_METRE
    d = depth.astype(np.float32)
    dmin = np.float32(DEFAULT_DEPTH_MIN * unit_scale)
    dmax = np.float32(DEFAULT_DEPTH_MAX * unit_scale)
    shift = np.float32(DEFAULT_DEPTH_SHIFT * unit_scale)
    log_min, log_max = math.log(float(dmin + shift)), math.log(float(dmax + shift))
    norm = (np.log(d + shift) - log_min) / (log_max - log_min)
    return np.rint(norm * DEPTH_QMAX).clip(0, DEPTH_QMAX).astype(np.uint16)


def depth_feature(height: int, width: int, fps: int, unit: str) -> dict:
    """The info.json entry LeRobot 0.6.1 writes for a depth camera."""
    return {
        "dtype": "video",
        "shape": [height, width, 1],
        "names": ["height", "width", "channels"],
        "info": {
            "is_depth_map": True, "depth_unit": unit, "video.height": height, "video.width": width,
            "video.codec": "hevc", "video.pix_fmt": DEPTH_PIX_FMT, "video.fps": fps, "video.channels": 1,
            "has_audio": False, "video.g": 2, "video.crf": 30, "video.preset": None, "video.fast_decode": 0,
            "video.video_backend": "pyav", "video.extra_options": {"x265-params": "lossless=1"},
            "video.depth_min": DEFAULT_DEPTH_MIN, "video.depth_max": DEFAULT_DEPTH_MAX,
            "video.shift": DEFAULT_DEPTH_SHIFT, "video.use_log": DEFAULT_DEPTH_USE_LOG,
        },
    }


def depth_stats(frames: np.ndarray) -> dict[str, list]:
    """Stats of [N, H, W] depth in its recorded unit, shaped [1, 1, 1] like LeRobot's (no /255)."""
    f = frames.astype(np.float64).reshape(-1)
    out = {"min": f.min(), "max": f.max(), "mean": f.mean(), "std": f.std()}
    res = {k: np.full((1, 1, 1), v).tolist() for k, v in out.items()}
    res["count"] = [int(frames.shape[0])]
    return res
