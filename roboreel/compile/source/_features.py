"""What the source's info.json says of a camera feature that the compile needs: its frame size."""

from __future__ import annotations

from typing import Any

from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.errors import SourceError


def camera_hw(feature: dict[str, Any]) -> tuple[int, int]:
    """(height, width) of a video feature, from its ``info`` or its shape (HWC or CHW, by ``names``)."""
    info = feature.get("info") or {}
    if "video.height" in info and "video.width" in info:
        return int(info["video.height"]), int(info["video.width"])
    shape, names = list(feature.get("shape") or []), list(feature.get("names") or [])
    if len(shape) == 3:
        if names[:1] == ["channels"] or shape[0] in (1, 3) and shape[2] not in (1, 3):
            return int(shape[1]), int(shape[2])
        return int(shape[0]), int(shape[1])
    raise SourceError(f"video feature has no height/width (shape {shape})", file=v3.INFO_PATH)
