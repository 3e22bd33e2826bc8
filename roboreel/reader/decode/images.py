"""Image features (``dtype: "image"``): the encoded image of a record row -> the array LeRobot returns.

LeRobot 0.6.1 reads these through HF ``datasets.Image.decode_example`` (``PIL.Image.open`` on the embedded bytes,
``load()``, ``ImageOps.exif_transpose`` when an EXIF orientation is set, no mode conversion) and then
``io_utils.pil_to_chw_tensor``: uint16 modes (``I;16*``, raw depth) become float32 ``[1, H, W]`` in native units,
everything else goes through torchvision's ``ToTensor`` (uint8 modes -> float32 ``[C, H, W]`` as ``x / 255``,
``I`` stays int32, ``F`` float32; mode ``1`` is 0/255 first). This module does the same with Pillow, numpy and
torch, so PNG (lossless) and TIFF samples are bit-identical to LeRobot's. It does it in two steps: ``decode_image``
(where the sample is made, a DataLoader worker) keeps 8-bit images as uint8 ``[C, H, W]``, and ``finish_images``
(where the sample or batch is finished) divides them, like video frames: uint8 is a quarter of float32's bytes
through roboreel.loader's worker pipes, and the division happens once, where the batch lands; ``return_uint8`` does not apply (LeRobot's
option is for video frames only). A depth image stored in metres is scaled to millimetres (LeRobot's default
``depth_output_unit``), as ``DatasetReader.get_item`` does.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps

_UINT16_MODES = frozenset({"I;16", "I;16B", "I;16L"})  # lerobot.datasets.io_utils.UINT16_PIL_MODES
MM_PER_METRE = np.float32(1000.0)  # lerobot.datasets.depth_utils.MM_PER_METRE


class ImageDecodeError(ValueError):
    """An image feature's bytes are not an image Pillow can decode."""


def decode_image(data: bytes, *, name: str = "image", metres: bool = False) -> np.ndarray:
    """One encoded image as LeRobot's sample holds it (see the module doc): a fresh, writable array.
    ``metres``: a depth image stored in metres, returned in millimetres. 8-bit images stay uint8 here (see the
    module doc: ``finish_images`` makes them float32)."""
    out = _decode(data, name)
    return out * MM_PER_METRE if metres else out


def _decode(data: bytes, name: str) -> np.ndarray:
    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except (OSError, ValueError, SyntaxError) as e:  # PIL raises these for truncated or unknown data
        raise ImageDecodeError(f"{name}: cannot decode the image ({len(data)} bytes): {e}") from e
    if img.getexif().get(Image.ExifTags.Base.Orientation) is not None:
        img = ImageOps.exif_transpose(img)
    if img.mode in _UINT16_MODES:
        return np.array(img, dtype=np.float32)[None, ...]
    arr = np.array(img, dtype={"I": np.int32, "F": np.float32}.get(img.mode, np.uint8))
    if img.mode == "1":
        arr = arr * np.uint8(255)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    chw = np.ascontiguousarray(arr.transpose(2, 0, 1))
    return chw  # uint8 [C, H, W] is divided in finish_images (ToTensor: uint8 .to(float32).div(255))


def decode_images(encoded: list[bytes], *, name: str = "image", metres: bool = False) -> np.ndarray:
    """Several encoded images stacked ``[T, C, H, W]`` (a ``delta_timestamps`` window, as LeRobot's
    ``torch.stack``); ``metres``: a depth image stored in metres, returned in millimetres."""
    return np.stack([decode_image(b, name=name, metres=metres) for b in encoded])


def finish_images(out: dict[str, Any], images: Mapping[str, bool],
                  image_transforms: Callable[[torch.Tensor], torch.Tensor] | None, *, batched: bool) -> None:
    """Finish the image features of a sample (or a collated batch, ``batched``) in place: uint8 becomes float32
    as ``x / 255.0`` (the arithmetic of video frames and of ``ToTensor``: true division by a Python float), then
    ``image_transforms`` where ``images[key]`` says so (LeRobot skips depth maps), per sample."""
    for key, transform in images.items():
        x = out[key]
        if x.dtype == torch.uint8:
            x = x / 255.0
        if transform and image_transforms is not None:
            x = torch.stack([image_transforms(s) for s in x]) if batched else image_transforms(x)
        out[key] = x
