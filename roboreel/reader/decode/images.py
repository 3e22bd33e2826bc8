"""Image features (``dtype: "image"``): the encoded image of a record row -> the array LeRobot returns.

LeRobot 0.6.1 reads these through HF ``datasets.Image.decode_example`` (``PIL.Image.open`` on the embedded bytes,
``load()``, ``ImageOps.exif_transpose`` when an EXIF orientation is set, no mode conversion) and then
``io_utils.pil_to_chw_tensor``: uint16 modes (``I;16*``, raw depth) become float32 ``[1, H, W]`` in native units,
everything else goes through torchvision's ``ToTensor`` (uint8 modes -> float32 ``[C, H, W]`` as ``x / 255``,
``I`` stays int32, ``F`` float32; mode ``1`` is 0/255 first). This module does the same with Pillow, numpy and
torch, so PNG (lossless) and TIFF samples are bit-identical to LeRobot's. It does it in two steps: ``decode_image``
(where the sample is made, a DataLoader worker) returns Pillow's pixels channels-last as they are (uint8 for 8-bit
images, a view of Pillow's bytes: no copy), and ``finish_images`` (where the sample or batch is finished) writes
the contiguous float32 ``[C, H, W]`` in one pass, like video frames: uint8 is a quarter of float32's bytes through
roboreel.loader's worker pipes, and every copy avoided is MBs of fresh pages (the reader pins glibc's mmap
threshold, heap.py, so each large buffer is page-faulted in: at 480x640, 2,600 minor faults and 8.8 CPU ms a
sample with a channels-first uint8 copy and the float32 division, ~1,470 and 7.1 ms this way).
``return_uint8`` does not apply (LeRobot's option is for video frames only). A depth image stored in metres is
scaled to millimetres (LeRobot's default ``depth_output_unit``), as ``DatasetReader.get_item`` does.
"""

from __future__ import annotations

import io
import warnings
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
    """One encoded image's pixels channels-last ``[H, W, C]`` (possibly a read-only view), for ``finish_images``
    to turn into what LeRobot's sample holds (see the module doc). ``metres``: a depth image stored in metres,
    returned in millimetres."""
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
    if img.mode in _UINT16_MODES:  # pil_to_chw_tensor: float32 in native units
        arr = np.array(img, dtype=np.float32)
    else:  # ToTensor: np.array(pic, mode_to_nptype.get(mode, uint8)), mode "1" scaled to 255
        arr = np.asarray(img)  # a read-only view of Pillow's bytes: finish_images makes the only copy
        if img.mode == "1":
            arr = arr.astype(np.uint8) * np.uint8(255)
        elif img.mode in ("I", "F"):
            arr = arr.astype({"I": np.int32, "F": np.float32}[img.mode], copy=False)
    return arr[:, :, None] if arr.ndim == 2 else arr


def decode_images(encoded: list[bytes], *, name: str = "image", metres: bool = False) -> np.ndarray:
    """Several encoded images stacked ``[T, H, W, C]`` (a ``delta_timestamps`` window: ``[T, C, H, W]`` once
    finished, as LeRobot's ``torch.stack``); ``metres``: as ``decode_image``."""
    return np.stack([decode_image(b, name=name, metres=metres) for b in encoded])


def _finish(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        with warnings.catch_warnings():  # a read-only view (decode_image): only read, into a new tensor
            warnings.simplefilter("ignore", UserWarning)
            x = torch.from_numpy(x)
    x = x.movedim(-1, -3)
    if x.dtype == torch.uint8:  # into the contiguous float32 sample, no temporary (div with out= makes one)
        y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        return y.copy_(x).div_(255.0)  # ToTensor's x.to(float32).div(255), equal to x / 255.0
    return x.contiguous()


def finish_images(out: dict[str, Any], images: Mapping[str, bool],
                  image_transforms: Callable[[torch.Tensor], torch.Tensor] | None, *, batched: bool) -> None:
    """Finish the image features of a sample (or a collated batch, ``batched``) in place: channels-last pixels
    (numpy or tensor) become contiguous ``[..., C, H, W]``, uint8 as float32 ``x / 255.0`` (the arithmetic of video
    frames and of ``ToTensor``: true division by a Python float), then ``image_transforms`` where ``images[key]``
    says so (LeRobot skips depth maps), per sample."""
    for key, transform in images.items():
        x = _finish(out[key])
        if transform and image_transforms is not None:
            x = torch.stack([image_transforms(s) for s in x]) if batched else image_transforms(x)
        out[key] = x
