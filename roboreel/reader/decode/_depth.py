"""Depth clips: 12-bit codes decoded with PyAV on the CPU and dequantised to what ``LeRobotDataset`` returns.

Why not torchcodec: it hands back RGB (uint8), and a depth clip's frames are 12-bit ``gray12le`` codes that must
reach the dequantiser untouched. LeRobot itself decodes depth with PyAV whatever ``video_backend`` says
(``lerobot/datasets/video_utils.py``, ``decode_video_frames``: "Decoding depth maps is only supported with the
'pyav' backend"), with ``frame.to_ndarray(format="gray12le")``; this does the same. On the GPU path depth is decoded
here too and the map moved to the device afterwards (the documented CPU fallback): torchcodec's CUDA decoder
converts to RGB as well, and NVDEC reports monochrome streams as unsupported (CUDA_ERROR_NOT_SUPPORTED for gray
video, NVIDIA/DALI#4483; not yet run on a GPU).

``DepthDecoder`` has the slice of torchcodec's ``VideoDecoder`` surface ``ClipDecoders`` uses
(``get_frames_at``, ``metadata``), so depth clips share its lanes, runs and release logic. It decodes forward
from where it is when the next frame is close ahead, and seeks to the keyframe before it otherwise.
"""

from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
import torch

from roboreel.formats.depth import DEPTH_PIX_FMT, DEPTH_QMAX, MM_PER_METRE, DepthQuant

_CONTINUE_MAX_FRAMES = 32  # decode forward instead of seeking when the next frame is at most this far ahead


_UINT16_MAX = 65535.0


def code_table(q: DepthQuant) -> torch.Tensor:
    """float32 [4096]: the output (mm) of every 12-bit code, by LeRobot's torch operations in its order
    (``dequantize_depth``, torch path: ``mul_(scale).add_(offset)``, ``exp_().sub_(shift)``, clamp, ``* 1000``,
    round, clamp to uint16's range)."""
    if q.use_log:
        log_min, log_max = math.log(q.depth_min + q.shift), math.log(q.depth_max + q.shift)
        scale, offset = (log_max - log_min) / DEPTH_QMAX, log_min
    else:
        scale, offset = (q.depth_max - q.depth_min) / DEPTH_QMAX, q.depth_min
    buf = torch.arange(DEPTH_QMAX + 1, dtype=torch.int32).to(dtype=torch.float32, copy=True)
    buf.mul_(scale).add_(offset)
    if q.use_log:
        buf.exp_().sub_(float(q.shift))
    buf.clamp_(float(q.depth_min), float(q.depth_max))
    return buf.mul_(MM_PER_METRE).round_().clamp_(0.0, _UINT16_MAX)


@dataclass
class DepthBatch:
    """What ``get_frames_at`` returns: float32 [N, 1, H, W] depth in the output unit, pts in seconds."""

    data: torch.Tensor
    pts_seconds: torch.Tensor


@dataclass
class DepthMetadata:
    width: int
    height: int


class DepthDecoder:
    """One depth clip decoded with PyAV; frames dequantised through ``quant``'s code table (formats/depth.py)."""

    def __init__(self, data: bytes, quant: DepthQuant, *, table: torch.Tensor | None = None,
                 device: str = "cpu") -> None:
        self._container = av.open(io.BytesIO(data), "r")
        self._stream = self._container.streams.video[0]
        # one thread: no FFmpeg worker threads a forked DataLoader worker could inherit mid-wait (_forksafe.py);
        # the decode stage already runs clips in parallel
        self._stream.codec_context.thread_count = 1
        self._tb = float(self._stream.time_base)
        self.fps = float(self._stream.average_rate or self._stream.base_rate)
        self.metadata = DepthMetadata(width=self._stream.codec_context.width, height=self._stream.codec_context.height)
        self.frame_bytes = 4 * self.metadata.width * self.metadata.height  # float32, one channel
        self._table = code_table(quant) if table is None else table
        self._device = device
        self._frames: Any = None  # the decode generator since the last seek
        self._last = -1  # frame number the generator handed out last

    def _seek(self, index: int) -> None:
        target = int(round(index / self.fps / self._tb))
        self._container.seek(max(0, target - 1), stream=self._stream, backward=True, any_frame=False)
        self._frames = self._container.decode(self._stream)
        self._last = -1

    def _frame(self, index: int) -> tuple[np.ndarray, float]:
        if self._frames is None or not (self._last < index <= self._last + _CONTINUE_MAX_FRAMES):
            self._seek(index)
        for frame in self._frames:
            if frame.pts is None:
                continue
            t = frame.pts * self._tb
            k = round(t * self.fps)
            self._last = k
            if k == index:
                return frame.to_ndarray(format=DEPTH_PIX_FMT), t
            if k > index:
                break
        raise ValueError(f"depth frame {index} is not in the clip")

    def get_frames_at(self, indices: list[int]) -> DepthBatch:
        codes, pts = [], []
        for i in indices:
            arr, t = self._frame(int(i))
            codes.append(arr)
            pts.append(t)
        idx = torch.from_numpy(np.stack(codes).astype(np.int64)).clamp_(0, len(self._table) - 1)
        data = self._table[idx].unsqueeze(1)  # [N, 1, H, W] float32, LeRobot's values code for code
        if self._device != "cpu":
            data = data.to(self._device)
        return DepthBatch(data=data, pts_seconds=torch.tensor(pts, dtype=torch.float64))

    def close(self) -> None:
        self._container.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # best effort at interpreter shutdown
            self._container.close()
