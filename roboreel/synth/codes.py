"""Pixel codes: which (global frame index, episode, camera) a decoded frame shows.

Synthetic frames carry their identity as a grid of black/white luma blocks, large enough to survive AV1 and
HEVC at ordinary CRFs, chroma subsampling and resizing. Any test, benchmark or validator can then say exactly
which frame it got, without trusting timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRID_COLS = 8
GRID_ROWS = 6
INDEX_BITS = 20
EPISODE_BITS = 12
CAMERA_BITS = 4
CHECK_BITS = 8
_BLACK, _WHITE = 16, 235


@dataclass(frozen=True)
class FrameCode:
    """The identity a frame carries."""

    index: int
    episode: int
    camera: int


def block_size(height: int, width: int) -> int:
    """Side of one code block: at least 8 px, and the grid never wider or taller than the frame."""
    side = max(8, min(height, width) // 16)
    if side * GRID_COLS > width or side * GRID_ROWS > height:
        raise ValueError(f"frame {width}x{height} too small for a {GRID_COLS}x{GRID_ROWS} code grid of 8 px blocks")
    return side


def _check(index: int, episode: int, camera: int) -> int:
    return (index * 31 + episode * 7 + camera * 3 + 0x5A) & ((1 << CHECK_BITS) - 1)


def _bits(code: FrameCode) -> list[int]:
    if not 0 <= code.index < 1 << INDEX_BITS:
        raise ValueError(f"index {code.index} does not fit in {INDEX_BITS} bits")
    if not 0 <= code.episode < 1 << EPISODE_BITS:
        raise ValueError(f"episode {code.episode} does not fit in {EPISODE_BITS} bits")
    if not 0 <= code.camera < 1 << CAMERA_BITS:
        raise ValueError(f"camera {code.camera} does not fit in {CAMERA_BITS} bits")
    out: list[int] = []
    for value, n in (
        (code.index, INDEX_BITS),
        (code.episode, EPISODE_BITS),
        (code.camera, CAMERA_BITS),
        (_check(code.index, code.episode, code.camera), CHECK_BITS),
    ):
        out.extend((value >> b) & 1 for b in range(n))
    return out


def paint(frame: np.ndarray, code: FrameCode) -> None:
    """Write ``code`` into the top-left corner of an HWC uint8 RGB ``frame`` in place."""
    h, w = frame.shape[:2]
    side = block_size(h, w)
    for i, bit in enumerate(_bits(code)):
        r, c = divmod(i, GRID_COLS)
        frame[r * side : (r + 1) * side, c * side : (c + 1) * side, :] = _WHITE if bit else _BLACK


def read(frame: np.ndarray | object, *, channels_first: bool | None = None) -> FrameCode:
    """Read the code from a decoded frame: HWC or CHW, uint8 or float in [0, 1], numpy or torch.

    Raises ValueError when the check bits disagree (the frame is not a coded frame, or is damaged).
    """
    arr = np.asarray(frame.cpu() if hasattr(frame, "cpu") else frame)
    if channels_first is None:
        channels_first = arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3)
    if channels_first:
        arr = np.moveaxis(arr, 0, -1)
    side = block_size(*arr.shape[:2])
    # Only the grid's corner is read: converting and averaging a whole 480x640 frame would cost ~20x more.
    grid = arr[: GRID_ROWS * side, : GRID_COLS * side]
    if grid.dtype != np.uint8:
        grid = np.clip(np.rint(grid.astype(np.float32) * 255.0), 0, 255).astype(np.uint8)
    luma = grid.astype(np.float32).mean(axis=-1) if grid.ndim == 3 else grid.astype(np.float32)
    q = max(1, side // 4)  # sample each block's centre, away from edges that ring
    cells = luma.reshape(GRID_ROWS, side, GRID_COLS, side)[:, q : side - q, :, q : side - q]
    n = INDEX_BITS + EPISODE_BITS + CAMERA_BITS + CHECK_BITS
    bits = [int(b) for b in (cells.mean(axis=(1, 3)).reshape(-1)[:n] > 128)]
    values = []
    pos = 0
    for nb in (INDEX_BITS, EPISODE_BITS, CAMERA_BITS, CHECK_BITS):
        values.append(sum(bits[pos + b] << b for b in range(nb)))
        pos += nb
    index, episode, camera, check = values
    if check != _check(index, episode, camera):
        raise ValueError(f"frame code check failed (read index={index} episode={episode} camera={camera})")
    return FrameCode(index, episode, camera)
