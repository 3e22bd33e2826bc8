"""What synthetic frames and rows contain: deterministic functions of (global index, episode, camera).

Frames are textured like a scene (smooth moving shading, a moving blob, mild fixed-pattern texture) so codecs
work about as hard as on robot footage, with a pixel code in the corner (codes.py). Tabular values are exact in
float32, so tests compare them with ``==``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from roboreel.synth.codes import FrameCode, paint


@lru_cache(maxsize=16)
def _texture(height: int, width: int, camera: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([0x5EED, camera, height, width]))
    return rng.integers(-5, 6, size=(height, width, 1), dtype=np.int16)


@lru_cache(maxsize=16)
def _grid(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    return yy / height, xx / width


def render_frame(index: int, episode: int, camera: int, frame_index: int, height: int, width: int) -> np.ndarray:
    """HWC uint8 RGB frame for global frame ``index`` (frame ``frame_index`` of ``episode``) of ``camera``."""
    y, x = _grid(height, width)
    t = frame_index * 0.12 + episode * 0.7
    base = np.empty((height, width, 3), np.float32)
    tint = ((camera * 53) % 90, (camera * 97 + 30) % 90, (camera * 31 + 60) % 90)
    for ch in range(3):
        base[..., ch] = 95 + tint[ch] + 45 * np.sin(2 * np.pi * (x * (1 + ch * 0.5) + y * 0.7) + t + ch)
    cy, cx = 0.55 + 0.25 * np.sin(t * 0.9), 0.5 + 0.3 * np.cos(t * 0.6)
    blob = np.exp(-(((y - cy) ** 2) + ((x - cx) ** 2)) / 0.01)
    base += blob[..., None] * np.array([60.0, -40.0, 20.0], np.float32)
    frame = np.clip(base + _texture(height, width, camera), 0, 255).astype(np.uint8)
    paint(frame, FrameCode(index, episode, camera))
    return frame


def state_row(index: int, dim: int) -> np.ndarray:
    """observation.state of global frame ``index``: index + j/8 (exact in float32 below 2**20)."""
    return (index + np.arange(dim, dtype=np.float64) / 8).astype(np.float32)


def action_row(index: int, dim: int) -> np.ndarray:
    """action of global frame ``index``: -(index) - j/8 (exact in float32)."""
    return (-(index + np.arange(dim, dtype=np.float64) / 8)).astype(np.float32)
