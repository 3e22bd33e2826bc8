"""Decoders on a device, with per-clip CPU fallback: the decode half of the main-process decode stage.

``DeviceDecoders`` looks like ``ClipDecoders`` to its callers (``frames``, ``release``, ``close``, ``stats``) but
holds two of them: one on the asked device (e.g. "cuda:0", torchcodec's NVDEC backend) and one on the CPU. Each
clip goes where ``Router`` says (NVDEC table, torchcodec build); a GPU decode that raises moves that clip to the
CPU and the batch goes on. Frames come back on the device that decoded them; the caller moves CPU frames to the
target device (one copy per clip per batch, see deferred.assemble).

NVDEC sessions: a GPU decoder is one torchcodec ``VideoDecoder(device="cuda:N")``, i.e. one NVDEC decoder with
its surfaces in GPU memory, alive while its clip is pooled by some worker (or until ``max_gpu_decoders`` forces
the least recently used one out; reopening it later costs a seek to the previous keyframe). A closed decoder's
NVDEC session returns to torchcodec's per-GPU cache (20 by default, ``torchcodec.decoders.
set_nvdec_cache_capacity``) and is reused by the next clip with the same codec and size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from roboreel.formats.depth import DepthQuant
from roboreel.formats.errors import CompiledFormatError
from roboreel.reader.decode._clips import ClipDecoders
from roboreel.reader.decode._counters import DecodeStats
from roboreel.reader.decode._decoder_cache import IdleDecoders
from roboreel.reader.decode._routing import Router
from roboreel.reader.decode._runs import RunBudget
from roboreel.reader.plan import EpisodeClip

DEFAULT_MAX_GPU_DECODERS = 256


@dataclass
class _ObservedDecoders(ClipDecoders):
    """ClipDecoders that report every decoder they open (to read torchcodec's ``cpu_fallback`` verdict)."""

    on_open: Callable[[EpisodeClip, Any], None] | None = None

    def decoder(self, clip: EpisodeClip, lane: int = 0) -> Any:
        opens = self.stats.decoder_opens
        dec = super().decoder(clip, lane)
        if self.stats.decoder_opens != opens and self.on_open is not None:
            self.on_open(clip, dec)
        return dec


class DeviceDecoders:
    """Per-clip decoders on ``router.device`` or the CPU (see the module docstring)."""

    def __init__(
        self,
        router: Router,
        *,
        keep: Mapping[str, int] | None = None,
        max_gpu_decoders: int = DEFAULT_MAX_GPU_DECODERS,
        max_call_bytes: int = 0,
        run_budget: RunBudget | None = None,
        gpu_run_budget: RunBudget | None = None,
        idle: IdleDecoders | None = None,
        depth: Mapping[str, DepthQuant] | None = None,
    ) -> None:
        if not isinstance(max_gpu_decoders, int) or max_gpu_decoders < 1:
            raise ValueError(f"max_gpu_decoders must be an integer >= 1, got {max_gpu_decoders!r}")
        self.router = router
        self.device = router.device
        budget = RunBudget(0) if run_budget is None else run_budget  # shared by every clip's decoders (_runs.py)
        # the GPU decoders' runs live in GPU memory, under their own (larger) bound: DecodeOptions.gpu_cache_mb
        gpu_budget = budget if gpu_run_budget is None else gpu_run_budget
        # ``idle``: the CPU decoders of a released clip are parked there for a later epoch (_decoder_cache.py);
        # GPU decoders are not (NVDEC sessions are few, and torchcodec caches those itself)
        self.depth = dict(depth or {})  # depth cameras decode on the CPU, always (_depth.py)
        self.cpu = ClipDecoders(device="cpu", keep=dict(keep or {}), max_call_bytes=max_call_bytes,
                                idle=idle, budget=budget, depth=self.depth)
        self.gpu: _ObservedDecoders | None = None
        if self.device != "cpu":
            self.gpu = _ObservedDecoders(device=self.device, keep=dict(keep or {}),
                                         max_open=max_gpu_decoders, on_open=self._opened, budget=gpu_budget)

    def frames(self, clip: EpisodeClip, wanted: dict[int, int],
               runs: Mapping[int, int] | None = None) -> dict[int, tuple[torch.Tensor, float]]:
        """Frames of ``clip`` (frame -> decoder lane): frame -> (uint8 [C, H, W] on the decoding device, pts).
        ``runs``: as ``ClipDecoders.frames``."""
        if clip.camera not in self.depth and self.router.device_for(clip.key, clip.camera) != "cpu" \
                and self.gpu is not None:
            try:
                return self.gpu.frames(clip, wanted, runs)
            except CompiledFormatError as e:
                cause = e.__cause__ or e
                if isinstance(cause, torch.OutOfMemoryError):
                    raise cause from None  # memory is the caller's to manage, not a reason to decode on the CPU
                self.gpu.release(clip)
                self.router.failed(clip.key, clip.camera, cause)
        return self.cpu.frames(clip, wanted, runs)

    def _opened(self, clip: EpisodeClip, dec: Any) -> None:
        status = getattr(dec, "cpu_fallback", None)  # torchcodec >= 0.13; NVDEC backend knows at open
        if status is not None and getattr(status, "status_known", False) and bool(status):
            self.router.cpu_fallback_seen(clip.key, clip.camera, str(status))

    def release(self, clip: EpisodeClip) -> None:
        self.cpu.release(clip)
        if self.gpu is not None:
            self.gpu.release(clip)
        self.router.release(clip.key)

    def close(self) -> None:
        self.cpu.close()
        if self.gpu is not None:
            self.gpu.close()

    @property
    def stats(self) -> DecodeStats:
        """Both decoders' counters summed."""
        a, b = self.cpu.stats, self.gpu.stats if self.gpu is not None else DecodeStats()
        return DecodeStats(decode_seconds=a.decode_seconds + b.decode_seconds,
                           decoder_opens=a.decoder_opens + b.decoder_opens,
                           decoder_reuses=a.decoder_reuses + b.decoder_reuses,
                           decode_calls=a.decode_calls + b.decode_calls,
                           frames_decoded=a.frames_decoded + b.frames_decoded)

    def __len__(self) -> int:
        return len(self.cpu) + (len(self.gpu) if self.gpu is not None else 0)
