"""uint8 pixels as float32 in [0, 1], with the same bits on every device.

LeRobot's frames are ``x / 255.0``: on the CPU that is a correctly rounded division. CUDA's kernel divides by a
Python (CPU) scalar as a multiply by its reciprocal (``1 / 255`` rounded, then the product rounded), which is one
bit off for some pixel values. Dividing by a 0-dim float32 tensor that lives on the batch's device is a true
division on both: the GPU path then gives the CPU path's floats, so a model sees the same inputs wherever its
frames were decoded.
"""

from __future__ import annotations

import torch

_DIVISORS: dict[torch.device, torch.Tensor] = {}


def _divisor(device: torch.device) -> torch.Tensor:
    """The 0-dim float32 255 on ``device``, made once per device (a CUDA one costs a copy to the GPU)."""
    d = _DIVISORS.get(device)
    if d is None:
        d = _DIVISORS[device] = torch.tensor(255.0, dtype=torch.float32, device=device)
    return d


def unit_float(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x / 255`` as float32, correctly rounded on every device (``out``: a float32 tensor of ``x``'s shape).

    A float32 ``x`` (uint8 values widened already) is divided in place when ``out`` is ``x``."""
    d = _divisor(x.device)
    return torch.div(x, d) if out is None else torch.div(x, d, out=out)
