"""LeRobot 0.6.1 beside PyAV 18: ``lerobot.datasets.pyav_utils`` names ``av.option.Option`` in annotations that
run at import, and PyAV 18 (the ``av`` that travels to the GPU node, for its FFmpeg libraries) has no ``av.option``
module, so ``import lerobot.datasets`` fails with an AttributeError. LeRobot only annotates with it, so a stand-in
module lets LeRobot import; nothing of PyAV's behaviour changes. Imports no roboreel."""

from __future__ import annotations

import sys
import types


def install() -> bool:
    """Give ``av`` an ``option`` module with an ``Option`` name where it has none; True when one was added (the
    part records it, so a result read with the stand-in says so)."""
    import av

    if hasattr(av, "option"):
        return False
    try:  # a PyAV that still ships the module, not yet imported
        import av.option  # noqa: F401

        return False
    except ImportError:
        pass
    shim = types.ModuleType("av.option")
    shim.Option = type("Option", (), {"__doc__": "stand-in: PyAV 18 has no av.option (scripts/gpu_check/pyavshim.py)"})
    sys.modules["av.option"] = shim
    av.option = shim
    return True
