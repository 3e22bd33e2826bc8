"""roboreel: compile LeRobot v3 datasets into stream-ready HEVC episode shards, and stream them into training."""

from __future__ import annotations

from typing import Any

from roboreel._version import __version__

__all__ = ["CompiledDataset", "DecodeOptions", "StreamOptions", "__version__", "loader"]


def __getattr__(name: str) -> Any:
    # Lazy, so ``import roboreel`` (and the CLI) stays light: the reader pulls in torch and torchcodec.
    if name == "CompiledDataset":
        from roboreel.reader.dataset import CompiledDataset

        return CompiledDataset
    if name in ("DecodeOptions", "StreamOptions"):
        from roboreel.reader import options

        return getattr(options, name)
    if name == "loader":
        from roboreel.reader.loader import loader

        return loader
    raise AttributeError(f"module 'roboreel' has no attribute {name!r}")
