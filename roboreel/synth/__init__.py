"""Synthetic LeRobot v3 datasets whose frames and rows identify themselves (demos, tests, benchmarks)."""

from roboreel.synth.codes import FrameCode, read
from roboreel.synth.generate import SynthConfig, SynthSummary, synthesize

__all__ = ["FrameCode", "SynthConfig", "SynthSummary", "read", "synthesize"]
