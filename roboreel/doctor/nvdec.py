"""The static NVDEC table (codec x frame size x GPU architecture), re-exported from roboreel.formats.nvdec.

The table moved to formats/ so the reader's GPU decode path can use it without importing doctor (reader imports
formats only). Doctor's modules and users keep importing it from here.
"""

from __future__ import annotations

from roboreel.formats.nvdec import CODECS, NvdecLimits, arch_name, av1_capable, nvdec_support

__all__ = ["CODECS", "NvdecLimits", "arch_name", "av1_capable", "nvdec_support"]
