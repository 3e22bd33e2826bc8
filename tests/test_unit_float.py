"""uint8 -> float32 / 255 gives the correctly rounded floats of every pixel value, on the CPU and on a GPU, and
the reader's float32 frames hold exactly those bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roboreel.reader.decode._clips import to_output
from roboreel.reader.decode._images import finish_images
from roboreel.reader.decode._unit import unit_float

HAVE_CUDA = torch.cuda.is_available()
# Every uint8 value, reference: the division done in float64, then rounded once to float32. k / 255 never falls on
# a float32 midpoint, so this is the correctly rounded float32 quotient.
VALUES = torch.arange(256, dtype=torch.int32).to(torch.uint8)
REFERENCE = (np.arange(256, dtype=np.float64) / 255.0).astype(np.float32)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy().view(np.uint32)


def test_every_value_is_correctly_rounded_on_the_cpu() -> None:
    got = unit_float(VALUES)
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(_bits(got), REFERENCE.view(np.uint32))
    # the same bits as LeRobot's own arithmetic on the CPU
    np.testing.assert_array_equal(_bits(got), _bits(VALUES / 255.0))


def test_out_and_in_place_forms_give_the_same_bits() -> None:
    x = VALUES.view(16, 16)
    out = torch.empty(16, 16, dtype=torch.float32)
    assert unit_float(x, out=out) is out
    np.testing.assert_array_equal(_bits(out).ravel(), REFERENCE.view(np.uint32))
    widened = x.to(torch.float32)
    unit_float(widened, out=widened)
    np.testing.assert_array_equal(_bits(widened).ravel(), REFERENCE.view(np.uint32))


def test_reader_outputs_use_the_correctly_rounded_division() -> None:
    frames = VALUES.view(1, 1, 16, 16).expand(2, 3, 16, 16).contiguous()
    np.testing.assert_array_equal(_bits(to_output(frames, return_uint8=False)).reshape(2, 3, 256)[1, 2],
                                  REFERENCE.view(np.uint32))
    assert to_output(frames, return_uint8=True).dtype == torch.uint8
    out = {"observation.images.top": VALUES.view(16, 16, 1).expand(16, 16, 3).numpy()}
    finish_images(out, {"observation.images.top": False}, None, batched=False)
    img = out["observation.images.top"]
    assert img.shape == (3, 16, 16) and img.is_contiguous()
    np.testing.assert_array_equal(_bits(img[0]).ravel(), REFERENCE.view(np.uint32))


@pytest.mark.needs_cuda
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU")
def test_every_value_is_correctly_rounded_on_the_gpu() -> None:
    x = VALUES.cuda()
    np.testing.assert_array_equal(_bits(unit_float(x)), REFERENCE.view(np.uint32))
    out = torch.empty(256, dtype=torch.float32, device="cuda")
    np.testing.assert_array_equal(_bits(unit_float(x, out=out)), REFERENCE.view(np.uint32))
