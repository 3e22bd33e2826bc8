"""What the encoded image of an image feature (``dtype: "image"``) decodes to, as LeRobot decodes it.

LeRobot 0.6.1 reads these through HF ``datasets.Image.decode_example`` (``PIL.Image.open`` on the embedded bytes,
``load()``, ``ImageOps.exif_transpose`` when an EXIF orientation is set, no mode conversion) and then
``io_utils.pil_to_chw_tensor``: uint16 modes (``I;16*``, raw depth) become float32 in native units, everything
else goes through torchvision's ``ToTensor`` (uint8 modes -> ``x / 255``, ``I`` stays int32, ``F`` float32; mode
``1`` is 0/255 first). ``image_pixels`` gives those pixels channels-last, before the float conversion, so the
reader (which finishes them, reader/decode/_images.py) and the compiler (which re-encodes 8-bit RGB images as
clips under ``--images clips``, compile/video/_imageclips.py) start from the same array.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageOps

UINT16_MODES = frozenset({"I;16", "I;16B", "I;16L"})  # lerobot.datasets.io_utils.UINT16_PIL_MODES


class ImageDecodeError(ValueError):
    """An image feature's bytes are not an image Pillow can decode (or not the kind a caller needs)."""


def open_image(data: bytes, *, name: str = "image") -> Image.Image:
    """The decoded image as ``datasets.Image.decode_example`` leaves it: loaded, EXIF orientation applied."""
    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except (OSError, ValueError, SyntaxError) as e:  # PIL raises these for truncated or unknown data
        raise ImageDecodeError(f"{name}: cannot decode the image ({len(data)} bytes): {e}") from e
    if img.getexif().get(Image.ExifTags.Base.Orientation) is not None:
        img = ImageOps.exif_transpose(img)
    return img


def image_pixels(data: bytes, *, name: str = "image") -> np.ndarray:
    """One encoded image's pixels channels-last ``[H, W, C]`` in the dtype LeRobot converts from (uint8 for 8-bit
    modes, a read-only view of Pillow's bytes; float32 for uint16 modes; int32 ``I``; float32 ``F``)."""
    img = open_image(data, name=name)
    if img.mode in UINT16_MODES:  # pil_to_chw_tensor: float32 in native units
        arr = np.array(img, dtype=np.float32)
    else:  # ToTensor: np.array(pic, mode_to_nptype.get(mode, uint8)), mode "1" scaled to 255
        arr = np.asarray(img)
        if img.mode == "1":
            arr = arr.astype(np.uint8) * np.uint8(255)
        elif img.mode in ("I", "F"):
            arr = arr.astype({"I": np.int32, "F": np.float32}[img.mode], copy=False)
    return arr[:, :, None] if arr.ndim == 2 else arr


def rgb_pixels(data: bytes, *, name: str = "image") -> np.ndarray:
    """An 8-bit RGB image's pixels ``[H, W, 3]`` uint8 (what LeRobot returns / 255); ImageDecodeError for any
    other mode, whose values an RGB clip could not carry (alpha, palette, gray, 16-bit)."""
    img = open_image(data, name=name)
    if img.mode != "RGB":
        raise ImageDecodeError(f"{name}: the image is Pillow mode {img.mode!r}, not 8-bit 'RGB'")
    return np.asarray(img)
