"""Compile a LeRobot v3 dataset into per-episode HEVC tar shards (see docs/format.md). Imports formats only."""

from roboreel.compile.finalize import finalize
from roboreel.compile.pipeline import CompileReport, compile_dataset
from roboreel.compile.settings import CompileSettings

__all__ = ["CompileReport", "CompileSettings", "compile_dataset", "finalize"]
