"""Where a decode batch's frames land: one tensor per camera, its device, memory order and dtype."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from roboreel.formats.manifest import CameraSpec
from roboreel.reader.decode._buffers import BufferPool


@dataclass(frozen=True)
class BatchLayout:
    """The batch tensors a ``DecodePool`` writes frames into: where each camera's lives, its memory order, dtype.

    Args:
        cameras: the manifest's cameras (frame size of each camera's batch tensor).
        staging: camera -> device its batch tensor lives on while decoding ("cpu", or "cuda:N" for NVDEC).
        pin: allocate CPU batch tensors in pinned memory (the batch goes to CUDA).
        channels_last: stage frames as [B * T, H, W, C] (``DecodePool``'s "Layout"); ``finish_batch`` makes them
            [.., C, H, W].
        dtype: ``torch.float32`` when the batch stays on the CPU and is wanted in float32: each thread writes
            ``frame / 255`` (numpy, float32: the same correctly rounded division as torch's ``x / 255.0``)
            into the float32 batch (pixels.unit_frame), with no intra-op OpenMP team competing for the cores.
        depth: depth cameras: float32 [.., 1, H, W] batches, decoded on the CPU (_depth.py).
    """

    cameras: dict[str, CameraSpec]
    staging: dict[str, torch.device]
    pin: bool = False
    channels_last: bool = False
    dtype: torch.dtype = torch.uint8
    depth: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.dtype not in (torch.uint8, torch.float32) or (self.dtype == torch.float32 and self.pin):
            raise ValueError(f"dtype {self.dtype} with pin={self.pin}: float32 batches are made by the threads only "
                             "when the batch stays on the CPU")
        object.__setattr__(self, "depth", frozenset(self.depth))

    def allocate(self, camera: str, n: int, buffers: BufferPool) -> torch.Tensor:
        """A batch tensor for ``n`` frames of ``camera``: from ``buffers`` when on the CPU and not pinned."""
        spec = self.cameras[camera]
        depth = camera in self.depth
        device = torch.device("cpu") if depth else self.staging.get(camera, torch.device("cpu"))
        pin = self.pin and device.type == "cpu"
        c = 1 if depth else 3
        dtype = torch.float32 if depth else self.dtype
        shape = (n, spec.height, spec.width, c) if self.channels_last else (n, c, spec.height, spec.width)
        if device.type == "cpu" and not pin:  # reused once the loop let go (_buffers.py: page faults, ~13% of CPU)
            return buffers.take(shape, dtype)
        return torch.empty(shape, dtype=dtype, device=device, pin_memory=pin)  # pinned: torch caches those
