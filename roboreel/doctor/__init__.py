"""``roboreel doctor``: can this machine decode a dataset, and where (CPU, NVDEC, or CPU fallback on a GPU)?

Reusable pieces: ``nvdec_support`` (static NVDEC table, no torch) for the GPU decode path, ``run_doctor`` for
the whole check. Imports roboreel.formats only, never compile/ or reader/.
"""

from roboreel.doctor.nvdec import av1_capable, nvdec_support
from roboreel.doctor.report import Report, run_doctor

__all__ = ["Report", "av1_capable", "nvdec_support", "run_doctor"]
