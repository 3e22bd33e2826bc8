"""Which cameras of a compiled dataset are depth maps, and the refusal of depth this roboreel cannot read exactly.

A depth camera's clips must hold the source's 12-bit codes (``gray12le``, compile/depth.py). A dataset compiled
before roboreel carried depth (its depth clips went through the 8-bit RGB path: values lost) is refused here,
naming the camera, rather than read as a 3-channel image.
"""

from __future__ import annotations

from roboreel.formats.depth import DEPTH_PIX_FMT, DepthQuant, is_depth
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.manifest import MANIFEST_NAME, Manifest


def depth_cameras(m: Manifest) -> dict[str, DepthQuant]:
    """camera -> its quantiser, for every depth camera; CompiledFormatError if one was stored lossy."""
    specs = {c.key: c for c in m.cameras}
    out = {}
    for key, feature in m.features.items():
        if feature.get("dtype") != "video" or not is_depth(feature):
            continue
        spec = specs.get(key)
        if spec is None or spec.pix_fmt != DEPTH_PIX_FMT:
            raise CompiledFormatError(
                f"depth camera {key!r} is stored as {spec.pix_fmt if spec else 'nothing'}, not lossless "
                f"{DEPTH_PIX_FMT}: its depth values were lost at compile (a roboreel before depth support); "
                "recompile the source", file=MANIFEST_NAME)
        try:
            out[key] = DepthQuant.from_feature(feature)
        except (TypeError, ValueError) as e:
            raise CompiledFormatError(f"depth camera {key!r} has unusable quantiser parameters: {e}",
                                      file=MANIFEST_NAME) from e
    return out
