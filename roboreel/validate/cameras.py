"""A camera's clips against its feature: channels, bit depth and frame size, and depth stored without loss.

Why: a clip the reader decodes into the wrong kind of tensor is data loss validate must see (a depth camera
compiled through the 8-bit RGB path would otherwise validate CLEAN while every value was lost). The rules:
- an RGB feature (``shape`` [H, W, 3]) has 3-channel 8-bit clips (yuv420p; what every reader decodes to RGB);
- a depth feature (``info.is_depth_map``, formats/depth.py) has 1-channel 12-bit clips (``gray12le``) whose
  record says ``lossless`` (compile proved every frame's codes equal to the source's); anything else is
  ``depth-lossy``;
- a clip's frame size is the feature's shape.
A source mp4 is held to the channel and size rules as warnings (a LeRobot depth camera is gray, an RGB one is not;
LeRobot converts either on read and returns the frames at the size they were encoded, and compile carries what
LeRobot reads and declares its real size).
"""

from __future__ import annotations

from typing import Any

import av

from roboreel.formats.depth import DEPTH_PIX_FMT, is_depth
from roboreel.validate.media import VideoProbe
from roboreel.validate.report import Report

RGB_BITS = 8
DEPTH_BITS = 12


def pix_fmt_traits(pix_fmt: str | None) -> tuple[int, int] | None:
    """(channels, bits per component) of a pixel format, None when unknown to FFmpeg."""
    if not pix_fmt:
        return None
    try:
        fmt = av.VideoFormat(pix_fmt)
    except (ValueError, av.FFmpegError):
        return None
    comps = [c for c in fmt.components if not c.is_alpha]
    return len(comps), comps[0].bits if comps else 0


def _axes(feature: dict[str, Any]) -> tuple[int, int, int] | None:
    """(height, width, channels) of a camera feature's 3-d shape: by its ``names`` when they say, else HWC, or
    CHW when the first axis looks like channels (as compile reads it, compile/finalize.py)."""
    shape, names = feature.get("shape"), feature.get("names")
    shape = list(shape) if isinstance(shape, list | tuple) else []
    names = list(names) if isinstance(names, list | tuple) and all(isinstance(n, str) for n in names) else []
    # a damaged feature (a shape of non-integers) says nothing: the meta checks report it, this must not crash
    if len(shape) != 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return None
    if {"height", "width", "channels"} <= set(names):
        return tuple(int(shape[names.index(n)]) for n in ("height", "width", "channels"))  # type: ignore[return-value]
    if shape[0] in (1, 3) and shape[2] not in (1, 3):
        return int(shape[1]), int(shape[2]), int(shape[0])
    return int(shape[0]), int(shape[1]), int(shape[2])


def feature_channels(feature: dict[str, Any]) -> int:
    """The channel count a camera feature declares (3 when its shape does not say)."""
    axes = _axes(feature)
    return axes[2] if axes is not None else (1 if is_depth(feature) else 3)


def feature_hw(feature: dict[str, Any]) -> tuple[int, int] | None:
    axes = _axes(feature)
    return None if axes is None else (axes[0], axes[1])


def check_channels(probe: VideoProbe, feature: dict[str, Any], report: Report, *, source: bool = False,
                   **where: Any) -> None:
    """The stream's channel count is the feature's: an error for a compiled clip; a warning for a source mp4,
    which LeRobot converts on read (``rgb24`` / ``gray12le``) and compile carries exactly as LeRobot reads it."""
    traits = pix_fmt_traits(probe.pix_fmt)
    want = 1 if is_depth(feature) else feature_channels(feature)
    if traits is not None and traits[0] != want:
        kind = "a depth map" if is_depth(feature) else "RGB"
        add = report.warning if source else report.error
        add("clip-channels", f"{probe.pix_fmt} has {traits[0]} channel(s), the feature ({kind}) has {want}", **where)


def check_size(probe: VideoProbe, feature: dict[str, Any], report: Report, *, source: bool = False,
               name: str = "the clip", **where: Any) -> None:
    """The frames' size is the one the feature's shape declares (what a policy is built for): ``clip-shape``, an
    error, for a compiled clip; for a source mp4 a ``video-codec-mismatch`` warning, as for info.json's
    ``video.height``/``video.width``, since LeRobot returns the frames as decoded and compile declares their size."""
    hw = feature_hw(feature)
    if hw is None or hw == (probe.height, probe.width):
        return
    if source:
        report.warning("video-codec-mismatch", f"frames are {probe.height}x{probe.width}, the feature's shape "
                       f"{feature.get('shape')} says {hw[0]}x{hw[1]}: LeRobot returns the frames as decoded; "
                       "compile carries them and declares their real size", **where)
    else:
        report.error("clip-shape", f"{name} is {probe.height}x{probe.width}, the feature's shape says "
                     f"{hw[0]}x{hw[1]}", **where)


def check_clip(probe: VideoProbe, feature: dict[str, Any], record: dict[str, Any] | None, name: str,
               report: Report, **where: Any) -> None:
    """A compiled clip against its feature (see the module doc); ``record``: the camera's entry of the episode's
    record json (``pix_fmt``, ``lossless``), None when absent."""
    depth = is_depth(feature)
    traits = pix_fmt_traits(probe.pix_fmt)
    check_channels(probe, feature, report, **where)
    if traits is not None:
        want_bits = DEPTH_BITS if depth else RGB_BITS
        if traits[1] != want_bits:
            report.error("clip-bit-depth", f"{name} is {probe.pix_fmt} ({traits[1]}-bit), the feature needs "
                         f"{want_bits}-bit", **where)
    check_size(probe, feature, report, name=name, **where)
    if depth and (probe.pix_fmt != DEPTH_PIX_FMT or not (record or {}).get("lossless")):
        why = (f"stored as {probe.pix_fmt}" if probe.pix_fmt != DEPTH_PIX_FMT
               else "its record does not say it was proven lossless")
        report.error("depth-lossy", f"{name}: depth clip {why}; recompile the source", **where)
