"""Capability probes: encode a tiny clip per codec with PyAV, decode it with torchcodec on CPU and on CUDA.

Asking "can this build decode HEVC on the GPU?" of version strings is guesswork; decoding two real frames is
not. The clips are 256x256, above every NVDEC minimum (docs/gpu.md), so a CUDA result measures the codec and
the GPU rather than the frame size. ``try_decode`` is shared with the dataset check.
"""

from __future__ import annotations

import io
import logging
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from roboreel.doctor.env import error_line
from roboreel.doctor.fallback import read_fallback_status

logger = logging.getLogger(__name__)

PROBE_SIZE = 256  # above NVDEC's largest minimum (HEVC 144x144)
PROBE_LEVELS = (64, 192)  # flat grey frames: frame k must decode to about this level
_LEVEL_TOLERANCE = 8.0
_PROBE_FPS = 10

# codec -> encoders to try, in order, with their options; the first PyAV has wins. No B-frames: compiled clips
# have none, and libx265 4.2 (PyAV 18) with B-frames sometimes emits garbage dts when flushing a 2-frame clip,
# which the mp4 muxer rejects ("pts/dts pair unsupported").
ENCODERS: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "hevc": (("libx265", {"x265-params": "log-level=none:bframes=0"}), ("hevc_nvenc", {})),
    "h264": (("libx264", {"bf": "0"}), ("libopenh264", {}), ("h264_nvenc", {})),
    "av1": (("libsvtav1", {"preset": "12"}), ("libaom-av1", {"cpu-used": "8"}), ("librav1e", {}),
            ("av1_nvenc", {})),
}

Engine = Literal["cpu", "nvdec", "cpu-fallback", "cuda"]


@dataclass
class DecodeOutcome:
    """What one decode attempt did. ``engine``: "cpu"; "nvdec"; "cpu-fallback" (asked for CUDA, torchcodec
    decoded on the CPU and uploaded, ``fallback`` is its text, ``fallback_cause`` the parsed cause, see
    doctor/fallback.py); "cuda" (on the GPU, fallback status unknown: this torchcodec does not say)."""

    ok: bool
    device: str
    engine: Engine | None = None
    codec: str | None = None
    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    first_frame_mean: float | None = None
    fallback: str | None = None
    fallback_cause: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def try_decode(source: Any, *, device: str, seek_mode: Literal["exact", "approximate"] = "exact") -> DecodeOutcome:
    """Open ``source`` (path, bytes or file object) with torchcodec on ``device`` and decode frame 0."""
    try:
        from torchcodec.decoders import VideoDecoder

        dec = VideoDecoder(source, device=device, seek_mode=seek_mode)
        frame = dec[0]
    except Exception as e:  # torchcodec raises RuntimeError/ValueError from C++ with long texts
        logger.debug("decode on %s failed", device, exc_info=True)
        return DecodeOutcome(ok=False, device=device, error=error_line(e))
    meta = dec.metadata
    out = DecodeOutcome(
        ok=True, device=device, engine="cpu", codec=meta.codec, width=meta.width, height=meta.height,
        num_frames=meta.num_frames, first_frame_mean=round(float(frame.float().mean()), 2),
    )
    if device != "cpu":
        status = read_fallback_status(dec)  # read after a decoded frame: the FFmpeg CUDA backend knows only then
        if status is None or not status.known:
            out.engine = "cuda"
        elif status.fallback:
            out.engine, out.fallback, out.fallback_cause = "cpu-fallback", status.text, status.cause
        elif frame.device.type != "cuda":  # NVDEC claimed, yet the frame is not on the GPU: not to be trusted
            out.ok, out.error = False, f"torchcodec reports no CPU fallback but returned the frame on {frame.device}"
        else:
            out.engine = "nvdec"
    return out


@contextmanager
def _quiet_svt():
    """SVT-AV1 prints its banner to stderr unless SVT_LOG is low; it reads the variable at encoder open."""
    old = os.environ.get("SVT_LOG")
    os.environ.setdefault("SVT_LOG", "1")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SVT_LOG", None)


def encode_probe(codec: str, *, size: int = PROBE_SIZE) -> tuple[bytes, str]:
    """A 2-frame ``size`` x ``size`` mp4 of ``codec`` from the first available encoder; (bytes, encoder)."""
    import av

    if codec not in ENCODERS:
        raise ValueError(f"codec {codec!r} is not one of {sorted(ENCODERS)}")
    errors = []
    for name, options in ENCODERS[codec]:
        if name not in av.codecs_available:
            continue
        try:
            buf = io.BytesIO()
            with _quiet_svt(), av.open(buf, "w", format="mp4") as out:
                stream = out.add_stream(name, rate=_PROBE_FPS, options=options)
                stream.width = stream.height = size
                stream.pix_fmt = "yuv420p"
                if codec == "hevc":
                    stream.codec_tag = "hvc1"  # as in compiled clips (Apple/QuickTime-compatible tag)
                for i, level in enumerate(PROBE_LEVELS):
                    frame = av.VideoFrame.from_ndarray(np.full((size, size, 3), level, np.uint8), format="rgb24")
                    frame.pts, frame.time_base = i, Fraction(1, _PROBE_FPS)  # unset pts makes mp4 muxing flaky
                    out.mux(stream.encode(frame))
                out.mux(stream.encode())
            return buf.getvalue(), name
        except Exception as e:  # a listed encoder can still fail to open (nvenc without a GPU)
            errors.append(f"{name}: {error_line(e)}")
    tried = [n for n, _ in ENCODERS[codec]]
    raise RuntimeError(f"no working {codec} encoder in PyAV (tried {tried}; " + "; ".join(errors) + ")"
                       if errors else f"PyAV's FFmpeg has none of the {codec} encoders {tried}")


@dataclass
class CodecProbe:
    """One codec's round trip: PyAV encode, then torchcodec decode on CPU and (if asked) on CUDA."""

    codec: str
    encoder: str | None
    encode_error: str | None
    cpu: DecodeOutcome | None
    cuda: DecodeOutcome | None

    def to_dict(self) -> dict[str, Any]:
        return {"codec": self.codec, "encoder": self.encoder, "encode_error": self.encode_error,
                "cpu": self.cpu.to_dict() if self.cpu else None, "cuda": self.cuda.to_dict() if self.cuda else None}


def _check_level(outcome: DecodeOutcome) -> DecodeOutcome:
    """A decode that returns the wrong picture is a failure too (e.g. a broken colour conversion)."""
    if outcome.ok and abs((outcome.first_frame_mean or 0.0) - PROBE_LEVELS[0]) > _LEVEL_TOLERANCE:
        outcome.ok = False
        outcome.error = f"frame 0 decoded to mean {outcome.first_frame_mean}, expected about {PROBE_LEVELS[0]}"
    return outcome


def probe_codec(codec: str, *, cuda_device: str | None) -> CodecProbe:
    """Round-trip ``codec``; ``cuda_device`` None skips the GPU decode (no CUDA to try)."""
    try:
        data, encoder = encode_probe(codec)
    except (RuntimeError, ValueError) as e:
        return CodecProbe(codec, None, str(e), None, None)
    cpu = _check_level(try_decode(data, device="cpu"))
    cuda = _check_level(try_decode(data, device=cuda_device)) if cuda_device else None
    return CodecProbe(codec, encoder, None, cpu, cuda)


def probe_codecs(codecs: tuple[str, ...] = ("hevc", "h264", "av1"), *, cuda_device: str | None) -> list[CodecProbe]:
    return [probe_codec(c, cuda_device=cuda_device) for c in codecs]
