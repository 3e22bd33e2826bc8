"""Did NVDEC decode the frames, or did torchcodec decode them on the CPU and upload them? Its own verdict, read.

``VideoDecoder(..., device="cuda")`` does not fail when NVDEC cannot take a clip: it decodes on the CPU and
copies the frames to the GPU, so a tensor on ``cuda`` proves nothing. torchcodec says so itself through
``VideoDecoder.cpu_fallback`` (a ``CpuFallbackStatus``; in the CUDA builds on PyPI from 0.15, and in 0.13):

- ``status_known``: whether it knows yet (the default NVDEC backend knows once the decoder is made, the FFmpeg
  CUDA backend after the first decoded frame);
- ``bool(status)``: True when it fell back;
- ``str(status)``: ``"[CUDA] Fallback status: Falling back due to: NVcuvid unavailable"`` (the driver's
  ``libnvcuvid.so.1`` could not be loaded: NVDEC decodes nothing on this machine), ``"... Video not supported"``
  (this clip's codec, size, chroma or bit depth is outside the GPU's NVDEC caps), ``"... No fallback required"``
  or ``"... Fallback status: Unknown"``.

Source: torchcodec ``src/torchcodec/decoders/_video_decoder.py`` (``CpuFallbackStatus``, the ``cpu_fallback``
property, which reads ``_core._get_backend_details``), read in the installed 0.13 package; the fallback itself
came with meta-pytorch/torchcodec#792 ("Support CPU fallback for videos that don't get decoded by nvdec"). The
cause is parsed from the public ``str()`` rather than from private attributes, so a release that renames them
still reads; what cannot be parsed is reported as unknown, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

FallbackCause = Literal["nvcuvid-unavailable", "video-not-supported", "unknown"]

_FALLING_BACK = re.compile(r"falling back due to:\s*(?P<why>.*)$", re.IGNORECASE)
_NO_FALLBACK = re.compile(r"no fallback required", re.IGNORECASE)

NVCUVID_HINT = ("libnvcuvid.so.1, the NVIDIA driver's NVDEC library, cannot be loaded: install the driver's video "
                "decode libraries; in a container, run it with NVIDIA_DRIVER_CAPABILITIES including 'video' "
                "(or 'all'); `ldconfig -p | grep nvcuvid` must list it")


@dataclass(frozen=True)
class FallbackStatus:
    """torchcodec's fallback verdict for one decoder. ``known`` False: it has not decided (or said nothing we can
    read); ``fallback`` True: the frames were decoded on the CPU; ``cause`` only when ``fallback``."""

    known: bool
    fallback: bool
    cause: FallbackCause | None
    text: str


def parse_fallback_status(text: str) -> FallbackStatus:
    """Read ``str(VideoDecoder.cpu_fallback)`` (see the module docstring for the forms)."""
    text = text.strip()
    m = _FALLING_BACK.search(text)
    if m:
        why = m.group("why").lower()
        cause: FallbackCause = ("nvcuvid-unavailable" if "nvcuvid" in why else
                                "video-not-supported" if "not supported" in why else "unknown")
        return FallbackStatus(known=True, fallback=True, cause=cause, text=text)
    if _NO_FALLBACK.search(text):
        return FallbackStatus(known=True, fallback=False, cause=None, text=text)
    return FallbackStatus(known=False, fallback=False, cause=None, text=text)


def read_fallback_status(decoder: Any) -> FallbackStatus | None:
    """The verdict of a torchcodec ``VideoDecoder`` that has decoded at least one frame; None when this
    torchcodec has no ``cpu_fallback`` (then nothing tells NVDEC from a fallback)."""
    status = getattr(decoder, "cpu_fallback", None)
    if status is None:
        return None
    parsed = parse_fallback_status(str(status))
    known = getattr(status, "status_known", parsed.known)
    if not known:
        return FallbackStatus(known=False, fallback=False, cause=None, text=parsed.text)
    fell_back = bool(status)
    return FallbackStatus(known=True, fallback=fell_back, cause=(parsed.cause or "unknown") if fell_back else None,
                          text=parsed.text)
