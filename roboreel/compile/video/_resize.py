"""Resizing camera frames at compile time (``--resize``): the filter, and which size each camera gets.

The target is what policies do after LeRobot's loader: ``torchvision.transforms.v2.functional.resize(frame,
[H, W], antialias=True)`` on the decoded uint8 RGB frame, i.e. torch's antialiased bilinear interpolation
(``torch.nn.functional.interpolate(mode="bilinear", antialias=True)``). Compile feeds x265 yuv420p, so a filter
is scored by the PSNR of its yuv420p output (as a reader decodes it to RGB) against that reference. Measured
with benchmarks/resize_filter_psnr.py (docs/format.md, "Resize and frame rate"): see ``FILTER`` for the choice.

Depth maps are never averaged: a depth camera resizes with nearest neighbour (``DEPTH_FILTER``).
"""

from __future__ import annotations

from typing import Any

import av
import numpy as np

from roboreel.compile.video._sws import ColourTags, to_yuv420p
from roboreel.formats.depth import is_depth

SWS_FILTERS = {"area": "AREA", "bilinear": "BILINEAR", "bicubic": "BICUBIC", "lanczos": "LANCZOS",
               "nearest": "POINT"}
# swscale's bilinear on the yuv planes: on downscales its tent filter widens with the scale factor, which is what
# torch's antialiased bilinear does, and it was the closest and the fastest candidate measured (docs/format.md).
FILTER = "bilinear"
DEPTH_FILTER = "nearest"


def resize_frame(frame: av.VideoFrame, height: int, width: int, method: str = FILTER) -> av.VideoFrame:
    """``frame`` as a yuv420p frame of ``height`` x ``width``, resized with ``method``, in the source's own range
    and matrix and tagged with them (a full-range or BT.709 camera stays so: sws.to_yuv420p).

    ``torch``: RGB (swscale's yuv -> rgb24 with the frame's tags, as PyAV/torchcodec readers convert), torch's
    antialiased bilinear interpolate on uint8 (exactly torchvision's ``resize(antialias=True)``), back to yuv420p
    in the frame's range and matrix. The others are swscale filters applied to the yuv planes directly.
    """
    if method == "torch":
        import torch  # only for this candidate (benchmarks/resize_filter_psnr.py)

        rgb = torch.from_numpy(frame.to_ndarray(format="rgb24")).permute(2, 0, 1)[None]
        small = torch.nn.functional.interpolate(rgb, size=(height, width), mode="bilinear", antialias=True)
        out = av.VideoFrame.from_ndarray(np.ascontiguousarray(small[0].permute(1, 2, 0).numpy()), format="rgb24")
        return to_yuv420p(out, "resize-torch", tags=None if frame.format.is_rgb else ColourTags.of(frame))
    return to_yuv420p(frame, f"resize-{method}", width=width, height=height, interpolation=SWS_FILTERS[method])


def transform_record(settings: Any, info: Any, specs: list[Any],
                     source_hw: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """What roboreel.json's ``settings.transform`` says a resizing / resampling compile did (inspect and doctor
    show it): source and output fps, and per camera (``source_hw``: its source size) the size written and the
    filter. Empty otherwise."""
    if not settings.transforms:
        return {}
    fps = settings.fps or info.fps
    cams = {}
    for spec in specs:
        feature = info.features[spec.key]
        src = list(source_hw[spec.key])
        if [spec.height, spec.width] != src:
            cams[spec.key] = {"source": src, "size": [spec.height, spec.width],
                              "filter": DEPTH_FILTER if is_depth(feature) else FILTER}
    return {"transform": {"source_fps": info.fps, "fps": fps, "frame_step": info.fps // fps, "cameras": cams}}
