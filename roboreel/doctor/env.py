"""Versions and builds: Python, torch, torchcodec (and the system FFmpeg it loaded), PyAV (and its bundled
FFmpeg), and the CUDA device, or a one-line reason why there is none.

Two FFmpegs live in one roboreel process and they differ: torchcodec loads the *system* FFmpeg shared
libraries (whichever major version it finds, e.g. Debian's 5.1), PyAV wheels bundle their *own* FFmpeg
(e.g. 8.x). Decoding goes through the first, encoding through the second, so both are reported, labelled.
"""

from __future__ import annotations

import logging
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

_SMI_TIMEOUT_S = 3
NVDEC_LIBRARY = "libnvcuvid.so.1"  # the NVIDIA driver's decode library, which torchcodec's NVDEC backend loads
_CPP_WHERE = re.compile(r"^\w+, \S+\.(?:cpp|h):\d+, ")


@dataclass
class CudaInfo:
    """The requested CUDA device, or why there is none (``available`` False, ``reason`` says why)."""

    available: bool
    reason: str = ""
    index: int | None = None
    name: str | None = None
    capability: tuple[int, int] | None = None
    total_memory_gib: float | None = None
    device_count: int = 0
    torch_cuda: str | None = None  # CUDA version torch was built with
    driver: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["capability"] = list(self.capability) if self.capability else None
        return d


@dataclass
class Environment:
    python: str
    platform: str
    torch: dict[str, Any] = field(default_factory=dict)
    torchcodec: dict[str, Any] = field(default_factory=dict)
    pyav: dict[str, Any] = field(default_factory=dict)
    cuda: CudaInfo | None = None
    nvdec_library: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cuda"] = self.cuda.to_dict() if self.cuda else None
        return d


def error_line(e: BaseException) -> str:
    """One line for an exception: its type and first line, without torchcodec's C++ "func, file.cpp:N, " prefix."""
    text = str(e).strip().splitlines()
    first = _CPP_WHERE.sub("", text[0]) if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _torch_facts() -> dict[str, Any]:
    try:
        import torch
    except ImportError as e:
        return {"installed": False, "error": error_line(e)}
    cuda = torch.version.cuda
    hip = getattr(torch.version, "hip", None)
    build = f"CUDA {cuda}" if cuda else f"ROCm {hip}" if hip else "CPU"
    return {"installed": True, "version": torch.__version__, "build": build, "cuda_version": cuda}


def _torchcodec_facts() -> dict[str, Any]:
    try:
        import torchcodec
        from torchcodec import _core
    except Exception as e:  # torchcodec raises RuntimeError when it finds no loadable FFmpeg
        return {"installed": False, "error": error_line(e)}
    version = torchcodec.__version__
    local = version.partition("+")[2]  # "0.13.0+cpu" / "0.13.0+cu128"; no suffix: the default PyPI wheel
    build = "CPU" if local == "cpu" else f"CUDA ({local})" if local.startswith("cu") else f"unlabelled ({version})"
    facts: dict[str, Any] = {"installed": True, "version": version, "build": build}
    try:
        libs = _core.get_ffmpeg_library_versions()
        facts["ffmpeg"] = {
            "version": libs.get("ffmpeg_version"),
            "libraries": {k: ".".join(map(str, v)) for k, v in libs.items() if k.startswith("lib")},
            "major": getattr(_core, "ffmpeg_major_version", None),
            "core_library": str(getattr(_core, "core_library_path", "")) or None,
        }
    except Exception as e:  # a private torchcodec function: absent or changed in other torchcodec versions
        facts["ffmpeg"] = {"error": error_line(e)}
    return facts


def _pyav_facts() -> dict[str, Any]:
    try:
        import av
    except ImportError as e:
        return {"installed": False, "error": error_line(e)}
    libs = getattr(av, "library_versions", {}) or {}
    return {
        "installed": True,
        "version": av.__version__,
        "ffmpeg": {
            "version": getattr(av, "ffmpeg_version_info", None),
            "libraries": {k: ".".join(map(str, v)) for k, v in libs.items()},
        },
    }


def parse_device(device: str) -> tuple[str, int | None]:
    """``"cpu"`` -> ("cpu", None); ``"cuda"`` -> ("cuda", None); ``"cuda:1"`` -> ("cuda", 1)."""
    kind, sep, idx = device.partition(":")
    if kind == "cpu" and not sep:
        return "cpu", None
    if kind == "cuda" and (not sep or idx.isdigit()):
        return "cuda", int(idx) if sep else None
    raise ValueError(f"device {device!r} is not one of 'cpu', 'cuda', 'cuda:N'")


def _driver_version(index: int) -> str | None:
    """The NVIDIA driver version from nvidia-smi (torch does not expose it); None when nvidia-smi is absent."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, f"--id={index}", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=_SMI_TIMEOUT_S, check=True,
        )
    except (OSError, subprocess.SubprocessError) as e:
        logger.debug("nvidia-smi failed: %s", e)
        return None
    return out.stdout.strip() or None


def cuda_info(device: str = "cuda") -> CudaInfo:
    """Facts about the CUDA device ``device`` names (index 0 for plain "cuda"), or why it cannot be used."""
    _, index = parse_device(device if device.startswith("cuda") else "cuda")
    index = index or 0
    try:
        import torch
    except ImportError as e:
        return CudaInfo(available=False, reason=f"torch is not importable ({error_line(e)})")
    built = torch.version.cuda
    if not torch.cuda.is_available():
        why = (f"torch {torch.__version__} is a CPU build (torch.version.cuda is None)" if built is None
               else f"torch {torch.__version__} is built for CUDA {built} but finds no usable GPU or driver")
        return CudaInfo(available=False, reason=f"torch.cuda.is_available() is False: {why}", torch_cuda=built)
    count = torch.cuda.device_count()
    if index >= count:
        return CudaInfo(available=False, reason=f"no device cuda:{index} (torch sees {count} CUDA device(s))",
                        device_count=count, torch_cuda=built)
    props = torch.cuda.get_device_properties(index)
    return CudaInfo(
        available=True, index=index, name=props.name, capability=(props.major, props.minor),
        total_memory_gib=round(props.total_memory / 2**30, 1), device_count=count, torch_cuda=built,
        driver=_driver_version(index),
    )


def nvdec_library() -> dict[str, Any]:
    """Whether the driver's NVDEC library loads in this process. torchcodec loads it to decode on NVDEC and, when
    it cannot, decodes on the CPU without an error (doctor/fallback.py); containers lack it unless started with
    the "video" driver capability."""
    if not sys.platform.startswith("linux"):
        return {"library": NVDEC_LIBRARY, "loadable": None, "error": f"not checked on {sys.platform}"}
    import ctypes

    try:
        ctypes.CDLL(NVDEC_LIBRARY)
    except OSError as e:
        return {"library": NVDEC_LIBRARY, "loadable": False, "error": error_line(e)}
    return {"library": NVDEC_LIBRARY, "loadable": True, "error": None}


def collect_environment(*, device: str = "cpu") -> Environment:
    """Everything above; CUDA facts are gathered whatever ``device`` is (index from ``device`` if cuda:N)."""
    return Environment(
        python=sys.version.split()[0],
        platform=platform.platform(),
        torch=_torch_facts(),
        torchcodec=_torchcodec_facts(),
        pyav=_pyav_facts(),
        cuda=cuda_info(device if device.startswith("cuda") else "cuda"),
        nvdec_library=nvdec_library(),
    )
