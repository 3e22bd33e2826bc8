"""Synthetic LeRobot v3 datasets whose frames and rows identify themselves (demos, tests, benchmarks)."""

from roboreel.synth.codes import FrameCode, read
from roboreel.synth.config import ENCODERS, SynthConfig
from roboreel.synth.generate import SynthSummary, synthesize


def camera_names(n: int) -> tuple[str, ...]:
    """LeRobot-style camera keys for ``n`` synthetic cameras (top, wrist, side, then cam3, cam4, ...)."""
    base = ("observation.images.top", "observation.images.wrist", "observation.images.side")
    return tuple(base[i] if i < len(base) else f"observation.images.cam{i}" for i in range(n))


__all__ = ["ENCODERS", "FrameCode", "SynthConfig", "SynthSummary", "camera_names", "read", "synthesize"]
