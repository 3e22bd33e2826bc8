"""What NVIDIA's hardware decoder (NVDEC) can decode, as a static table: codec x frame size x GPU architecture.

Pure data and Python, no torch. It lives in formats/ because both sides need it and neither may import the
other: the reader's GPU decode path (reader/decode/_routing.py) asks it before opening a clip on the GPU, so it can
route a clip to the CPU (and say why, once) instead of trusting a silent fallback; ``roboreel doctor``
(doctor/nvdec.py re-exports it) asks it to explain what it measured. The runtime truth is NVDEC's own
``cuvidGetDecoderCaps`` (which torchcodec's NVDEC backend checks, falling back to CPU decode when a stream is
outside it); this table predicts that answer without a GPU.

Sources (see docs/gpu.md for the full list and what is and is not verified):
- Codec x architecture: NVIDIA Video Codec SDK 13.0, *NVDEC Application Note*, table "NVDEC Hardware
  Capabilities": AV1 Main profile decoding is "N" for Turing / GA100 / Hopper and "Y" for GA10x (every Ampere
  chip except GA100), Ada, Blackwell and Jetson Thor; HEVC needs Pascal or later (select 2nd-gen Maxwell).
- Frame size limits: NVIDIA *NVDEC Video Decoder API Programming Guide*, chapter "Video Decoder Capabilities":
  H.264 48x16 .. 4096x4096 (8192x8192 on Blackwell), HEVC 144x144 .. 8192x8192, AV1 128x128 .. 8192x8192.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CODECS", "NvdecLimits", "arch_name", "av1_capable", "nvdec_support"]


@dataclass(frozen=True)
class NvdecLimits:
    """Frame size limits of one codec on NVDEC, in pixels (display size; see nvdec_support)."""

    min_width: int
    min_height: int
    max_width: int
    max_height: int


# codec -> limits. Keys are FFmpeg codec names, as torchcodec's metadata.codec reports them.
CODECS: dict[str, NvdecLimits] = {
    "h264": NvdecLimits(48, 16, 4096, 4096),
    "hevc": NvdecLimits(144, 144, 8192, 8192),
    "av1": NvdecLimits(128, 128, 8192, 8192),
}
_ALIASES = {"h265": "hevc", "avc": "h264", "avc1": "h264", "hvc1": "hevc", "hev1": "hevc", "av01": "av1"}

# Compute capabilities whose NVDEC decodes AV1: GA10x (sm_86, Jetson Orin sm_87), Ada (sm_89), and every
# architecture from Blackwell on (sm_100, sm_101/sm_110 Thor, sm_120, ...). Not: GA100 (sm_80, A100/A30),
# Hopper (sm_90, H100/H200/GH200), Turing (sm_75) or older.
_AV1_CAPABLE = frozenset({(8, 6), (8, 7), (8, 9)})
_BLACKWELL_MAJOR = 10
_ARCH_NAMES = {
    (7, 0): "Volta", (7, 2): "Volta (Xavier)", (7, 5): "Turing", (8, 0): "GA100 (A100/A30)",
    (8, 6): "GA10x Ampere", (8, 7): "GA10x Ampere (Orin)", (8, 9): "Ada", (9, 0): "Hopper (H100/H200)",
}


def arch_name(capability: tuple[int, int]) -> str:
    """A readable architecture name for a compute capability, e.g. (9, 0) -> 'sm_90 Hopper (H100/H200)'."""
    major, minor = capability
    name = _ARCH_NAMES.get((major, minor))
    if name is None:
        name = "Blackwell or later" if major >= _BLACKWELL_MAJOR else "pre-Volta" if major < 7 else "unknown"
    return f"sm_{major}{minor} {name}"


def av1_capable(capability: tuple[int, int]) -> bool:
    """True when the NVDEC of a GPU with this compute capability decodes AV1."""
    return tuple(capability) in _AV1_CAPABLE or capability[0] >= _BLACKWELL_MAJOR


def nvdec_support(
    codec: str, height: int, width: int, *, capability: tuple[int, int] | None = None
) -> tuple[bool, str]:
    """Whether NVDEC can decode ``codec`` frames of ``height`` x ``width``; returns (ok, reason).

    ``capability`` is the GPU's compute capability (``torch.cuda.get_device_capability(i)``). Without it only
    the architecture-independent facts are checked, and AV1 is answered False ("depends on the GPU"):
    routing a clip to the CPU is always safe, trusting NVDEC blindly is not.

    Sizes are compared as displayed. A frame a few pixels under a minimum may still pass NVDEC's check,
    which looks at the coded size (padded to the codec's block size), so this answer errs toward the CPU.
    """
    name = _ALIASES.get(codec.lower(), codec.lower())
    limits = CODECS.get(name)
    if limits is None:
        return False, f"codec {codec!r} is not in roboreel's NVDEC table (knows {sorted(CODECS)})"
    if height <= 0 or width <= 0:
        raise ValueError(f"frame size must be positive, got {width}x{height}")
    if capability is not None:
        major = capability[0]
        if name == "av1" and not av1_capable(capability):
            return False, (f"{arch_name(capability)} has no AV1 NVDEC (AV1 needs GA10x Ampere sm_86/87, Ada sm_89 "
                           "or Blackwell sm_100+)")
        if name == "hevc" and major < 6:
            return False, f"{arch_name(capability)}: HEVC NVDEC needs Pascal (sm_60) or later"
    max_w, max_h = limits.max_width, limits.max_height
    if name == "h264" and capability is not None and capability[0] >= _BLACKWELL_MAJOR:
        max_w, max_h = 8192, 8192  # Blackwell added 8192x8192 H.264
    if width < limits.min_width or height < limits.min_height:
        return False, (f"{width}x{height} is below NVDEC's {name} minimum {limits.min_width}x{limits.min_height}: "
                       "decoded on the CPU instead")
    if width > max_w or height > max_h:
        return False, f"{width}x{height} is above NVDEC's {name} maximum {max_w}x{max_h}"
    if name == "av1" and capability is None:
        return False, "AV1 NVDEC depends on the GPU (GA10x/Ada/Blackwell only); compute capability unknown"
    return True, f"{name} {width}x{height} is within NVDEC's limits" + (
        f" on {arch_name(capability)}" if capability is not None else "")
