"""Which codecs each of the process's two FFmpegs can decode and encode.

PyAV answers for its bundled FFmpeg (``av.codecs_available``). torchcodec exposes no codec list for the
system FFmpeg it loaded, so that one is asked directly through ctypes, using only the long-stable parts of
FFmpeg's public ABI: ``av_codec_iterate``, ``av_codec_is_decoder`` and the first four fields of ``AVCodec``
(name, long_name, type, id), which have kept their place since FFmpeg 4. Any failure is reported, not raised.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

logger = logging.getLogger(__name__)

FAMILIES = ("hevc", "h264", "av1")  # codecs roboreel meets: compiled clips, old sources, LeRobot sources
_AVMEDIA_TYPE_VIDEO = 0


class _AVCodecHead(ctypes.Structure):
    """The leading fields of FFmpeg's ``AVCodec`` (public, stable across majors 4..8)."""

    _fields_ = [("name", ctypes.c_char_p), ("long_name", ctypes.c_char_p), ("type", ctypes.c_int),
                ("id", ctypes.c_int)]


def _loaded_library(stem: str, major: int) -> str | None:
    """Path of ``lib<stem>.so.<major>`` as mapped into this process (Linux), i.e. the copy torchcodec uses."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1]
                if f"/lib{stem}.so.{major}" in path:
                    return path
    except OSError:
        return None
    return None


def system_ffmpeg_codecs(*, avcodec_major: int, avutil_major: int | None = None) -> dict[str, Any]:
    """Video decoders/encoders of the system libavcodec torchcodec loaded, grouped for FAMILIES.

    Returns ``{"library": path, "families": {fam: {"decoders": [...], "encoders": [...]}}, "video_decoders":
    n, "video_encoders": n, "hw_device_types": [...]}`` or ``{"error": "..."}``.
    """
    path = _loaded_library("avcodec", avcodec_major)
    if path is None:
        return {"error": f"libavcodec.so.{avcodec_major} is not mapped into this process (non-Linux, or "
                         "torchcodec linked it differently)"}
    try:
        lib = ctypes.CDLL(path)
        lib.av_codec_iterate.restype = ctypes.c_void_p
        lib.av_codec_iterate.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.av_codec_is_decoder.argtypes = [ctypes.c_void_p]
        lib.avcodec_descriptor_get_by_name.restype = ctypes.c_void_p
        lib.avcodec_descriptor_get_by_name.argtypes = [ctypes.c_char_p]
        family_of = {}
        for fam in FAMILIES:  # AVCodecDescriptor starts with its enum AVCodecID id
            desc = lib.avcodec_descriptor_get_by_name(fam.encode())
            if desc:
                family_of[ctypes.c_int.from_address(desc).value] = fam
        out: dict[str, Any] = {"library": path, "families": {f: {"decoders": [], "encoders": []} for f in FAMILIES}}
        counts = {"decoders": 0, "encoders": 0}
        opaque = ctypes.c_void_p(0)
        while codec := lib.av_codec_iterate(ctypes.byref(opaque)):
            head = _AVCodecHead.from_address(codec)
            if head.type != _AVMEDIA_TYPE_VIDEO:
                continue
            kind = "decoders" if lib.av_codec_is_decoder(codec) else "encoders"
            counts[kind] += 1
            if head.id in family_of:
                out["families"][family_of[head.id]][kind].append(head.name.decode())
        out["video_decoders"], out["video_encoders"] = counts["decoders"], counts["encoders"]
        out["hw_device_types"] = _hw_device_types(avutil_major) if avutil_major is not None else None
        return out
    except (OSError, AttributeError, ValueError) as e:
        logger.debug("ctypes probe of %s failed", path, exc_info=True)
        return {"library": path, "error": f"{type(e).__name__}: {e}"}


def _hw_device_types(avutil_major: int) -> list[str] | None:
    """Hardware device types built into the system libavutil (torchcodec's "ffmpeg" CUDA backend needs cuda)."""
    path = _loaded_library("avutil", avutil_major)
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    lib.av_hwdevice_iterate_types.restype = ctypes.c_int
    lib.av_hwdevice_iterate_types.argtypes = [ctypes.c_int]
    lib.av_hwdevice_get_type_name.restype = ctypes.c_char_p
    lib.av_hwdevice_get_type_name.argtypes = [ctypes.c_int]
    names, t = [], lib.av_hwdevice_iterate_types(0)  # AV_HWDEVICE_TYPE_NONE starts and ends the walk
    while t != 0:
        names.append(lib.av_hwdevice_get_type_name(t).decode())
        t = lib.av_hwdevice_iterate_types(t)
    return names


def pyav_codecs() -> dict[str, Any]:
    """Video decoders/encoders of PyAV's bundled FFmpeg, grouped for FAMILIES (same shape as above)."""
    try:
        import av
        from av.codec import Codec
    except ImportError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    family_of = {Codec(f, "r").id: f for f in FAMILIES}
    out: dict[str, Any] = {"families": {f: {"decoders": [], "encoders": []} for f in FAMILIES}}
    counts = {"decoders": 0, "encoders": 0}
    for name in sorted(av.codecs_available):
        for mode, kind in (("r", "decoders"), ("w", "encoders")):
            try:
                codec = Codec(name, mode)
            except Exception:  # PyAV raises UnknownCodecError (not exported the same way in every release)
                continue
            if codec.type != "video" or codec.name != name:
                continue
            counts[kind] += 1
            if codec.id in family_of:
                out["families"][family_of[codec.id]][kind].append(name)
    out["video_decoders"], out["video_encoders"] = counts["decoders"], counts["encoders"]
    return out
