"""An image feature's clip (``--images clips``): an episode's encoded images (PNG, JPEG, ... in the data parquet)
-> one HEVC clip, every frame held to the PSNR floor in RGB against the image LeRobot decodes.

Why a ladder (measured on ALOHA 480x640 and 96x96 images, docs/format.md "Image features"): at roboreel's video
defaults (4:2:0, CRF 24) the lowest frame is 39.5 dB at 480x640, and at 96x96 4:2:0 cannot reach 40 dB at any CRF
(chroma subsampling alone costs it: 37.5 dB at CRF 10), while 4:4:4 reaches 43.4 dB at CRF 12. So each clip tries,
in turn, until every frame reaches ``settings.min_psnr``:

1. yuv420p at the settings' CRF, then lower ones as each try's lowest frame asks (``transcode.next_crf``, down
   to 12 below): the fastest to decode (1.2 ms a 480x640
   frame on one core against 2.9 ms for its PNG). Skipped when the 4:2:0 conversion alone (no codec) already
   leaves a sampled frame within 2 dB of the floor, or when a side is odd;
2. yuv444p at the same CRFs: no chroma subsampling (2.2-2.8 ms a 480x640 frame);
3. ``gbrp`` lossless (x265 ``lossless=1`` on the RGB planes): bit-exact, so never under the floor; as large as
   PNG and slower to decode than it, the price of content no lossy rung carries.

The check decodes the clip with torchcodec, the reader's own CPU decoder and colour conversion, and compares every
frame with the source image's RGB pixels (``formats.images.rgb_pixels``, LeRobot's decode): the floor is on what a
sample holds, not on the encoder's yuv input. Images that are not 8-bit RGB (alpha, palette, gray, 16-bit) are
refused, naming the file and episode: ``--images keep`` carries them exactly.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction

import av
import numpy as np

from roboreel.compile.settings import CompileSettings, x265_size_params
from roboreel.compile.video._clipproof import check_clip_timing
from roboreel.compile.video._floorcheck import next_crf, psnr
from roboreel.compile.video._sws import reformat, to_rgb24
from roboreel.compile.video._transcode import _MUX_OPTIONS, Clip, sample_indices
from roboreel.formats.depth import is_depth
from roboreel.formats.errors import RoboreelError, SourceError
from roboreel.formats.images import ImageDecodeError, rgb_pixels
from roboreel.formats.table_features import IMAGE_DTYPE

LOSSLESS = "gbrp"  # x265 codes the G, B, R planes themselves: decoding gives the source pixels back exactly
RGB8_CLIP_FORMATS = frozenset({"yuv420p", "yuv444p", LOSSLESS})  # what an image feature's clips may be, by episode
_CHROMA_MARGIN_DB = 2.0  # 4:2:0 is tried only when its conversion alone keeps every sampled frame this far above
_CHROMA_SAMPLES = 8


def image_clip_keys(features: dict[str, dict], settings: CompileSettings) -> list[str]:
    """Image features this compile turns into clips: with ``--images clips`` (the default), every 3-channel,
    non-depth one x265 can encode (``kept_images`` says why the others stay encoded images)."""
    if settings.images != "clips":
        return []
    return [k for k, f in features.items() if f.get("dtype") == IMAGE_DTYPE and _clip_refusal(f) is None]


def kept_images(features: dict[str, dict], settings: CompileSettings) -> dict[str, str]:
    """Image features that stay the source's encoded images under ``--images clips``, and why."""
    if settings.images != "clips":
        return {}
    return {k: why for k, f in features.items() if f.get("dtype") == IMAGE_DTYPE
            and (why := _clip_refusal(f)) is not None}


def _clip_refusal(feature: dict) -> str | None:
    if is_depth(feature):
        return "a depth map (no RGB clip carries it exactly)"
    hwc = _hwc(feature)
    if hwc is None or hwc[2] != 3:
        return f"not 3 channels (shape {feature.get('shape')})"
    try:
        x265_size_params(height=hwc[0], width=hwc[1])
    except ValueError:
        return f"{hwc[0]}x{hwc[1]} is too small for x265"
    return None


def clip_keys(features: dict[str, dict], settings: CompileSettings) -> list[str]:
    """Every feature compiled as a clip, in info.json order: video features, and image features under clips."""
    images = set(image_clip_keys(features, settings))
    return [k for k, f in features.items() if f.get("dtype") == "video" or k in images]


def _hwc(feature: dict) -> tuple[int, int, int] | None:
    """(height, width, channels) of an image feature's shape: by its ``names``, else HWC (or CHW when the first
    axis looks like channels)."""
    shape, names = [int(x) for x in feature.get("shape") or []], list(feature.get("names") or [])
    if len(shape) != 3:
        return None
    if {"height", "width", "channels"} <= set(names):
        return shape[names.index("height")], shape[names.index("width")], shape[names.index("channels")]
    if shape[0] in (1, 3) and shape[2] not in (1, 3):
        return shape[1], shape[2], shape[0]
    return shape[0], shape[1], shape[2]


def _rungs(settings: CompileSettings, chroma_ok: bool) -> Iterator[tuple[str, int | None]]:
    """(pix_fmt, CRF) to try in turn; ``send(worst)`` after each lossy try (the lowest frame's dB) picks the next
    CRF of the same pixel format, or moves on to the next format when none is left (``next_crf``)."""
    for fmt in (["yuv420p"] if chroma_ok else []) + ["yuv444p"]:
        crf: int | None = settings.crf
        while crf is not None:
            worst = yield fmt, crf
            crf = next_crf(settings, crf, worst)
    yield LOSSLESS, None


def _chroma_floor(frames: Sequence[np.ndarray]) -> float:
    """Lowest PSNR of a yuv420p round trip (swscale, no codec) over the given RGB frames."""
    worst = math.inf
    for a in frames:
        yuv = reformat(av.VideoFrame.from_ndarray(a, format="rgb24"), "image-yuv420p", format="yuv420p")
        worst = min(worst, psnr(a, to_rgb24(yuv, "image-rgb24")))
    return worst


def _encode(images: Sequence[bytes], pixels: Callable[[int], np.ndarray], *, fps: int, settings: CompileSettings,
            rung: tuple[str, int | None], size: tuple[int, int], progress: Callable[[int], None] | None) -> bytes:
    """The images as one clip at a rung of the ladder: (pixel format, CRF; None: lossless), (height, width)."""
    (pix_fmt, crf), (height, width) = rung, size
    buf = io.BytesIO()
    tb = Fraction(1, fps)
    params = settings.x265_params(height=height, width=width) + (":lossless=1" if crf is None else "")
    with av.open(buf, "w", format="mp4", container_options=_MUX_OPTIONS) as out:
        stream = out.add_stream("libx265", rate=fps)
        stream.width, stream.height, stream.pix_fmt, stream.time_base = width, height, pix_fmt, tb
        stream.codec_tag = "hvc1"
        stream.options = {"preset": settings.preset, "x265-params": params, **({} if crf is None else
                                                                                {"crf": str(crf)})}
        for k in range(len(images)):
            frame = reformat(av.VideoFrame.from_ndarray(pixels(k), format="rgb24"), f"image-{pix_fmt}", format=pix_fmt)
            frame.pts, frame.time_base = k, tb
            for packet in stream.encode(frame):
                out.mux(packet)
            if progress is not None:
                progress(1)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def _scores(data: bytes, pixels: Callable[[int], np.ndarray], length: int) -> list[float]:
    """PSNR in RGB of every frame as the reader decodes it (torchcodec, CPU) against the source image."""
    from torchcodec.decoders import VideoDecoder  # the reader's decoder: the floor holds for what it returns

    dec = VideoDecoder(data, seek_mode="exact", num_ffmpeg_threads=1)
    if len(dec) != length:
        raise RoboreelError(f"image clip holds {len(dec)} frames, the episode {length}")
    return [psnr(pixels(k), dec[k].permute(1, 2, 0).numpy()) for k in range(length)]


def encode_image_clip(images: Sequence[bytes], *, key: str, fps: int, settings: CompileSettings, where: str,
                      episode: int, progress: Callable[[int], None] | None = None) -> Clip:
    """One episode of image feature ``key`` as an HEVC clip (see the module doc); ``images``: its encoded images
    in frame order. Raises SourceError (file and episode named) for an image that is not 8-bit RGB or not the
    episode's size."""
    def pixels(k: int) -> np.ndarray:
        name = f"image feature {key!r} frame {k}"
        try:
            a = rgb_pixels(images[k], name=name)
        except ImageDecodeError as e:
            raise SourceError(f"{e}: an RGB clip cannot carry it; compile with --images keep", file=where,
                              episode=episode) from e
        if height >= 0 and a.shape[:2] != (height, width):
            raise SourceError(f"{name} is {a.shape[0]}x{a.shape[1]}, frame 0 is {height}x{width}", file=where,
                              episode=episode)
        return a

    if not images:
        raise SourceError(f"image feature {key!r} has no frames", file=where, episode=episode)
    height, width = -1, -1
    height, width = pixels(0).shape[:2]  # (the size check is off while these are unknown)
    chroma = _chroma_floor([pixels(k) for k in sample_indices(len(images), _CHROMA_SAMPLES)]) \
        if height % 2 == 0 and width % 2 == 0 else -math.inf
    chroma_ok = chroma >= settings.min_psnr + _CHROMA_MARGIN_DB
    rungs = _rungs(settings, chroma_ok)
    pix_fmt, crf = next(rungs)
    for attempt in range(64):  # bounded by the rungs (<= 2 x 13 CRFs + lossless)
        try:
            data = _encode(images, pixels, fps=fps, settings=settings, rung=(pix_fmt, crf), size=(height, width),
                           progress=progress if attempt == 0 else None)
        except av.error.FFmpegError as e:
            raise RoboreelError(f"HEVC encode of image feature {key!r} failed: {e} ({where}, episode {episode})") \
                from e
        check_clip_timing(data, length=len(images), fps=fps, where=where, episode=episode)  # _scores decodes it
        scores = _scores(data, pixels, len(images))
        worst = min(scores)
        if crf is None and worst != math.inf:
            raise RoboreelError(f"lossless image clip of {key!r} does not decode to the source pixels "
                                f"({worst:.2f} dB) ({where}, episode {episode})")
        if worst >= settings.min_psnr:
            why = _why(pix_fmt, crf, settings, chroma)
            return Clip(data=data, codec="hevc", height=height, width=width, frames=len(images), gop=settings.gop,
                        bframes=settings.bframes, mode="encode", pix_fmt=pix_fmt, lossless=crf is None, why=why,
                        psnr=[scores[k] for k in sample_indices(len(images), settings.psnr_frames)], crf=crf,
                        psnr_min=worst, psnr_checked=len(scores))
        pix_fmt, crf = rungs.send(worst)
    raise AssertionError("unreachable: the lossless rung always passes")


def _why(pix_fmt: str, crf: int | None, settings: CompileSettings, chroma: float) -> str:
    """Why this clip is what it is, in words the compile summary can group (the numbers are in the clip record:
    ``pix_fmt``, ``crf``, ``psnr_min``)."""
    if crf is None:
        return "image feature, lossless: no lossy encode kept every frame over the PSNR floor"
    what = f"image feature, {pix_fmt}"
    if pix_fmt != "yuv420p":
        what += (": yuv420p alone loses too much colour" if chroma < settings.min_psnr + _CHROMA_MARGIN_DB
                 else ": yuv420p missed the PSNR floor")
    if crf != settings.crf:
        what += "; a lower CRF to keep every frame over the PSNR floor"
    return what
