"""Which device decodes a clip: the decode device a dataset asks for, and the per-clip CPU fallback.

``decode_device`` is "cpu", "cuda" or "cuda:N". Asking for CUDA where there is none is an error at construction
(``DecodeOptions(fallback="cpu")`` turns it into one warning and CPU decoding), because a training job that silently
decodes on the CPU is slower by an order of magnitude and nobody notices. Individual clips the GPU cannot decode
are a different matter: NVDEC has minimum frame sizes and codec x architecture gaps (AV1 on A100/H100), a
torchcodec build may lack CUDA, and a decode can fail. Those clips go to the CPU automatically, ``Router`` logs
each reason once (module logger, not once per clip) and counts them, so the cost is visible in ``stats()``.

The decision asks the static NVDEC table (formats/nvdec.py) before opening anything on the GPU, instead of
trusting torchcodec's silent fallback; torchcodec's own verdict (``VideoDecoder.cpu_fallback``) is recorded too.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Literal

from roboreel.formats.depth import DEPTH_PIX_FMT
from roboreel.formats.manifest import CameraSpec
from roboreel.formats.nvdec import nvdec_support

logger = logging.getLogger(__name__)

DecodeFallback = Literal["error", "cpu"]
DECODE_FALLBACKS = ("error", "cpu")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")

# Why a clip was decoded on the CPU although a GPU was asked for (stats keys).
FallbackKind = Literal["nvdec-table", "torchcodec-no-cuda", "gpu-error", "torchcodec-fallback"]


def parse_decode_device(device: object) -> str:
    """Check the spelling of ``decode_device``: "cpu", "cuda" or "cuda:N" (a ``torch.device`` is accepted)."""
    text = str(device)
    if not _DEVICE.match(text):
        raise ValueError(f"decode_device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return text


def resolve_decode_device(device: object, *, fallback: DecodeFallback = "error") -> str:
    """The device decoding will use: ``device`` checked against this machine.

    Without a usable CUDA device, "cuda" raises ``RuntimeError("no CUDA device: ...")`` unless ``fallback="cpu"``,
    which logs one warning and returns "cpu". Checking availability does not create a CUDA context, so forked
    DataLoader workers are unaffected.
    """
    if fallback not in DECODE_FALLBACKS:
        raise ValueError(f"decode_fallback must be one of {DECODE_FALLBACKS}, got {fallback!r}")
    text = parse_decode_device(device)
    if text == "cpu":
        return text
    import torch

    why = None
    if not torch.cuda.is_available():
        build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        why = f"torch.cuda.is_available() is False (torch {torch.__version__} is {build})"
    elif ":" in text and int(text.split(":")[1]) >= torch.cuda.device_count():
        why = f"{text} asked for, but this machine has {torch.cuda.device_count()} CUDA device(s)"
    if why is None:
        return text
    if fallback == "cpu":
        logger.warning("DecodeOptions(device=%r): no CUDA device (%s); decoding on the CPU (fallback='cpu')",
                       text, why)
        return "cpu"
    raise RuntimeError(f"no CUDA device: {why}; use DecodeOptions(device='cpu'), or DecodeOptions(fallback='cpu') "
                       "to fall back to CPU decoding with a warning")


def torchcodec_cuda_support() -> tuple[bool, str]:
    """Whether the installed torchcodec can decode on CUDA at all, from its build tag (no CUDA call).

    A "+cpu" build raises "Unsupported device" for any CUDA decoder; builds without a tag (source builds) are
    given the benefit of the doubt, and a runtime "Unsupported device" error turns the GPU off (``Router``).
    """
    import torchcodec

    version = getattr(torchcodec, "__version__", "?")
    if version.endswith("+cpu"):
        return False, f"torchcodec {version} is a CPU build (install a CUDA build to decode on the GPU)"
    return True, f"torchcodec {version}"


def choose_device(
    device: str,
    *,
    codec: str,
    height: int,
    width: int,
    capability: tuple[int, int] | None,
    torchcodec_cuda: tuple[bool, str],
    pix_fmt: str = "yuv420p",
) -> tuple[str, FallbackKind | None, str]:
    """Where a clip of ``codec`` at ``height`` x ``width`` (``pix_fmt``) decodes when ``device`` is asked for.

    Returns ``(device, kind, reason)``: ``kind`` is None when the clip decodes on ``device``; otherwise the
    device is "cpu" and ``kind``/``reason`` say why (pure: no CUDA call, testable anywhere).
    """
    if device == "cpu":
        return "cpu", None, "decode_device is cpu"
    ok, why = torchcodec_cuda
    if not ok:
        return "cpu", "torchcodec-no-cuda", why
    ok, why = nvdec_support(codec, height, width, capability=capability)
    if not ok:
        return "cpu", "nvdec-table", why
    if pix_fmt not in ("yuv420p", DEPTH_PIX_FMT):  # image features as 4:4:4 / RGB clips (compile --images clips)
        return "cpu", "nvdec-table", (f"{pix_fmt} clips: torchcodec's CUDA path asks NVDEC for NV12 (4:2:0) "
                                      "output only")
    return device, None, why


class Router:
    """Per-clip device choice for one decode stage, with one warning per (reason, camera) and counts.

    A clip keeps its device until it is released (its episode left every pool), so a clip is counted once
    however many batches it appears in. ``failed`` moves a clip to the CPU after a GPU decode error; an
    "Unsupported device" error means this torchcodec cannot use CUDA at all, so every later clip goes to the CPU.
    """

    def __init__(
        self,
        device: str,
        *,
        cameras: Mapping[str, CameraSpec],
        capability: tuple[int, int] | None = None,
        torchcodec_cuda: tuple[bool, str] | None = None,
    ) -> None:
        self.device = parse_decode_device(device)
        self.cameras = dict(cameras)
        self.capability = capability
        if torchcodec_cuda is None:
            torchcodec_cuda = torchcodec_cuda_support() if self.device != "cpu" else (True, "")
        self.torchcodec_cuda = torchcodec_cuda
        self._by_camera: dict[str, tuple[str, FallbackKind | None, str]] = {}
        self._clips: dict[tuple, str] = {}
        self._silent: set[tuple] = set()
        self._warned: set[tuple[str, str | None]] = set()
        self.clips: Counter[str] = Counter()  # clips routed, by device ("cpu" / "cuda:N")
        self.fallbacks: Counter[str] = Counter()  # fallback clips, by kind
        self._lock = threading.RLock()  # the decode pool's threads route clips concurrently (reader/decode/_stage.py)

    def device_for(self, key: tuple, camera: str) -> str:
        """The device that decodes clip ``key`` (shard, episode, camera) of ``camera``."""
        with self._lock:
            dev = self._clips.get(key)
            if dev is not None:
                return dev
            dev, kind, reason = self._camera_route(camera)
            if kind is not None:
                self._fallback(kind, camera, reason)
            self._clips[key] = dev
            self.clips[dev] += 1
            return dev

    def failed(self, key: tuple, camera: str, error: BaseException) -> None:
        """A GPU decode of clip ``key`` raised: decode it on the CPU from now on (and say why, once)."""
        with self._lock:
            text = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            if "Unsupported device" in text:
                self.torchcodec_cuda = (False, f"torchcodec cannot decode on {self.device}: {text}")
                self._by_camera.clear()
                self._fallback("torchcodec-no-cuda", None, self.torchcodec_cuda[1])
            else:
                self._fallback("gpu-error", camera, f"GPU decode failed ({type(error).__name__}: {text})")
            was = self._clips.get(key, "cpu")
            if was != "cpu":
                self.clips[was] -= 1
                if not self.clips[was]:
                    del self.clips[was]
                self.clips["cpu"] += 1
            self._clips[key] = "cpu"

    def cpu_fallback_seen(self, key: tuple, camera: str, status: str) -> None:
        """torchcodec opened a GPU decoder but decodes on the CPU itself (``VideoDecoder.cpu_fallback``)."""
        with self._lock:
            if key not in self._silent:
                self._silent.add(key)
                self._fallback("torchcodec-fallback", camera,
                               f"torchcodec decodes it on the CPU and uploads: {status}")

    def release(self, key: tuple) -> None:
        with self._lock:
            self._clips.pop(key, None)
            self._silent.discard(key)

    def camera_device(self, camera: str) -> str:
        """Where ``camera``'s clips decode unless one fails (the static route; nothing is counted or logged)."""
        with self._lock:
            return self._camera_route(camera)[0]

    def _camera_route(self, camera: str) -> tuple[str, FallbackKind | None, str]:
        route = self._by_camera.get(camera)
        if route is None:
            spec = self.cameras.get(camera)
            if spec is None:
                raise ValueError(f"camera {camera!r} is not in the manifest (cameras: {sorted(self.cameras)})")
            route = choose_device(self.device, codec=spec.codec, height=spec.height, width=spec.width,
                                  capability=self.capability, torchcodec_cuda=self.torchcodec_cuda,
                                  pix_fmt=spec.pix_fmt)
            self._by_camera[camera] = route
        return route

    def _fallback(self, kind: FallbackKind, camera: str | None, reason: str) -> None:
        self.fallbacks[kind] += 1
        if kind == "torchcodec-no-cuda":
            camera = None  # one reason for every camera
        if (kind, camera) not in self._warned:
            self._warned.add((kind, camera))
            where = f"camera {camera!r}" if camera else "every camera"
            logger.warning("%s: decoding on the CPU instead of %s: %s (logged once; counted in stats()"
                           "['fallback_clips'])", where, self.device, reason)

    @property
    def fallback_clips(self) -> int:
        return sum(self.fallbacks.values())
