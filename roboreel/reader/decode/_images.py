"""Image features (``dtype: "image"``) kept encoded in the record rows: the encoded image -> the array LeRobot
returns.

Decoding follows LeRobot 0.6.1 exactly (formats/images.py: Pillow, EXIF orientation, ``pil_to_chw_tensor``'s
dtypes), so PNG (lossless) and TIFF samples are bit-identical to LeRobot's. The plan room names a sample's encoded
images (plan/requests.ImageRequest); decoding them happens in two steps: ``decoded_images`` (where the sample's
frames are decoded, or its batch collated for roboreel.loader: a DataLoader worker) returns Pillow's pixels
channels-last as they are
(uint8 for 8-bit images, a view of Pillow's bytes: no copy), and ``finish_images`` (where the sample or batch is
finished) writes the contiguous float32 ``[C, H, W]`` in one pass, like video frames: uint8 is a quarter of
float32's bytes through roboreel.loader's worker pipes, and every copy avoided is MBs of fresh pages (the reader
pins glibc's mmap threshold, _heap.py, so each large buffer is page-faulted in: at 480x640, 2,600 minor faults and
8.8 CPU ms a sample with a channels-first uint8 copy and the float32 division, ~1,470 and 7.1 ms this way).
``return_uint8`` does not apply (LeRobot's option is for video frames only). A depth image stored in metres is
scaled to millimetres (LeRobot's default ``depth_output_unit``), as ``DatasetReader.get_item`` does.
Image features compiled as clips (``--images clips``) are cameras instead, decoded with the video frames.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from roboreel.formats.depth import MM_PER_METRE
from roboreel.formats.images import ImageDecodeError, image_pixels
from roboreel.reader.decode._unit import unit_float
from roboreel.reader.plan import ImageRequest

_MM_PER_METRE = np.float32(MM_PER_METRE)  # float32 x float32: the product LeRobot's float32 tensors give

__all__ = ["NO_IMAGE_CLIPS", "ImageClips", "ImageDecodeError", "decode_image", "decode_images", "decoded_images",
           "finish_images"]


def decode_image(data: bytes, *, name: str = "image", metres: bool = False) -> np.ndarray:
    """One encoded image's pixels channels-last ``[H, W, C]`` (possibly a read-only view), for ``finish_images``
    to turn into what LeRobot's sample holds (see the module doc). ``metres``: a depth image stored in metres,
    returned in millimetres."""
    out = image_pixels(data, name=name)
    return out * _MM_PER_METRE if metres else out


def decode_images(encoded: list[bytes], *, name: str = "image", metres: bool = False) -> np.ndarray:
    """Several encoded images stacked ``[T, H, W, C]`` (a ``delta_timestamps`` window: ``[T, C, H, W]`` once
    finished, as LeRobot's ``torch.stack``); ``metres``: as ``decode_image``."""
    return np.stack([decode_image(b, name=name, metres=metres) for b in encoded])


def decoded_images(values: dict[str, Any], images: Mapping[str, bool]) -> dict[str, Any]:
    """A sample's ``values`` with the image features among them (``images``, PendingSample.images) decoded: each
    ``ImageRequest`` (what plan asked for) becomes its pixels, channels-last as ``decode_image`` returns them. A
    new dict where there is anything to decode, ``values`` itself otherwise."""
    out = values
    for key in images:
        req = values.get(key)
        if isinstance(req, ImageRequest):
            if out is values:
                out = dict(values)
            out[key] = (decode_images(list(req.data), name=req.name, metres=req.metres) if req.stacked
                        else decode_image(req.data[0], name=req.name, metres=req.metres))
    return out


def _finish(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        with warnings.catch_warnings():  # a read-only view (decode_image): only read, into a new tensor
            warnings.simplefilter("ignore", UserWarning)
            x = torch.from_numpy(x)
    x = x.movedim(-1, -3)
    if x.dtype == torch.uint8:  # into the contiguous float32 sample, no temporary (div with out= makes one)
        y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        return unit_float(y.copy_(x), out=y)  # ToTensor's x.to(float32).div(255), equal to x / 255.0
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


@dataclass(frozen=True)
class ImageClips:
    """Image features compiled as clips (``compile --images clips``): decoded with the cameras, but returned as
    LeRobot returns image features, float32 whatever ``return_uint8`` says (LeRobot's option is for video frames),
    and in their column's place: LeRobot puts the video frames first and keeps an image feature where
    ``hf_dataset`` has it, among the table columns (``apply``). Empty for most datasets, which costs nothing."""

    keys: frozenset[str] = frozenset()
    positions: Mapping[str, int] = field(default_factory=dict)  # every feature -> its index in info.json's features
    leading: frozenset[str] = frozenset()  # the video cameras, first in a sample

    @classmethod
    def of(cls, features: Mapping[str, Mapping[str, Any]], cameras: list[str]) -> ImageClips:
        keys = frozenset(k for k in cameras if features[k].get("dtype") == "image")
        return cls(keys, {k: i for i, k in enumerate(features)}, frozenset(cameras) - keys) if keys else cls()

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def apply(self, sample: dict[str, Any]) -> dict[str, Any]:
        """``sample`` (or a batch) with the image-clip keys moved to LeRobot's places."""
        if not self.keys:
            return sample
        pending = sorted((k for k in self.keys if k in sample), key=self.positions.__getitem__)
        out: dict[str, Any] = {}
        for k, v in sample.items():
            if k in self.keys:
                continue
            while pending and k not in self.leading and self.positions.get(k, len(self.positions)) > \
                    self.positions[pending[0]]:
                out[pending[0]] = sample[pending[0]]
                pending.pop(0)
            out[k] = v
        out.update((k, sample[k]) for k in pending)
        return out


NO_IMAGE_CLIPS = ImageClips()  # a dataset without image features compiled as clips
