"""compile/video/_sws.py: conversions through reused per-thread swscale contexts give the pixels a fresh
``frame.reformat`` / ``to_ndarray(format=...)`` gives, whatever the uses interleaved and on several threads."""

from __future__ import annotations

import glob
from concurrent.futures import ThreadPoolExecutor

import av
import numpy as np
import pytest
from conftest import make_source

from roboreel.compile.video import SWS_FILTERS, resize_frame
from roboreel.compile.video import _sws as sws


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> list[av.VideoFrame]:
    """Decoded frames of a real AV1 mp4 from the synthetic generator (96x128, pixel-coded)."""
    root = make_source(tmp_path_factory.mktemp("sws") / "src", episodes=2, height=96, width=128,
                       min_length=12, max_length=12)
    path = sorted(glob.glob(str(root / "videos" / "*" / "*" / "*.mp4")))[0]
    with av.open(path) as c:
        out = list(c.decode(video=0))
    assert len(out) >= 12 and out[0].format.name == "yuv420p"
    return out


def _pixels(frame: av.VideoFrame) -> np.ndarray:
    return frame.to_ndarray()  # the visible pixels only (a plane's row padding is not part of the frame)


def test_rgb24_is_to_ndarray_interleaved_with_other_uses(frames):
    for frame in frames:
        np.testing.assert_array_equal(sws.to_rgb24(frame, "a"), frame.to_ndarray(format="rgb24"))
        small = sws.reformat(frame, "b", width=64, height=48, format="yuv420p", interpolation="BILINEAR")
        np.testing.assert_array_equal(
            _pixels(small), _pixels(frame.reformat(width=64, height=48, format="yuv420p", interpolation="BILINEAR")))
        np.testing.assert_array_equal(sws.to_rgb24(small, "a"), small.to_ndarray(format="rgb24"))


@pytest.mark.parametrize("method", sorted(SWS_FILTERS))
@pytest.mark.parametrize("size", [(48, 64), (50, 74), (100, 150), (96, 128)])
def test_resize_frame_is_a_fresh_reformat(frames, method, size):
    h, w = size
    for frame in frames:
        want = frame.reformat(width=w, height=h, format="yuv420p", interpolation=SWS_FILTERS[method])
        got = resize_frame(frame, h, w, method)
        assert (got.height, got.width, got.format.name) == (h, w, "yuv420p")
        np.testing.assert_array_equal(_pixels(got), _pixels(want))


def test_threads_get_their_own_contexts(frames):
    want = [f.to_ndarray(format="rgb24") for f in frames]

    def run(_: int) -> list[np.ndarray]:
        return [sws.to_rgb24(f, "same-use") for f in frames * 4]

    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(run, range(8)):
            for g, w in zip(got, want * 4, strict=True):
                np.testing.assert_array_equal(g, w)


def test_rgb_source_to_yuv420p_as_image_clips_convert(frames):
    for frame in frames:
        rgb = frame.to_ndarray(format="rgb24")
        got = sws.reformat(av.VideoFrame.from_ndarray(rgb, format="rgb24"), "image-yuv420p", format="yuv420p")
        want = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        np.testing.assert_array_equal(_pixels(got), _pixels(want))
