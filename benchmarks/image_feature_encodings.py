"""Image features (``dtype: "image"``): keep the source's encoded images, or re-encode them as HEVC clips?

Measures, on the first ``--frames`` frames of a source mp4 (e.g. the ALOHA footage of ``benchmarks/render_aloha.py``)
at its own size and resized (``--sizes``), what each choice costs a reader and what it loses:
- PNG as LeRobot's image writer makes it (Pillow, ``compress_level=1``) and JPEG (quality 95, another common
  Hub encoding): bytes per frame, CPU per decoded frame with Pillow (to uint8, as ``reader/decode/_images.py``
  decodes before its float conversion), exact or not;
- HEVC clips: roboreel's video encoder at its defaults (``compile.video.encode_clip``: 4:2:0, CRF 24), each
  rung of the image-clip ladder alone (``--rungs``: yuv420p / yuv444p at CRF 24, 16, 12, and gbrp lossless), and
  what ``--images clips`` picks (``compile.video.encode_image_clip``): bytes per frame, CPU per frame
  decoding it front to back with torchcodec on one thread (uint8 RGB), and PSNR of every frame in RGB against
  the source frame (what a LeRobot user's sample would differ by).
CPU time (``time.process_time``), medians of ``--rounds`` alternated rounds, one torch/FFmpeg thread, so a shared
machine's load hits every variant alike. Results: docs/format.md, "Image features".

    python benchmarks/image_feature_encodings.py SOURCE.mp4 --frames 150 --sizes 480x640 96x96
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time

import av
import cv2
import numpy as np
from PIL import Image


def source_frames(path: str, n: int) -> list[np.ndarray]:
    out = []
    with av.open(path) as f:
        for frame in f.decode(video=0):
            out.append(frame.to_ndarray(format="rgb24"))
            if len(out) >= n:
                break
    return out


def encode_images(frames: list[np.ndarray], fmt: str) -> list[bytes]:
    out = []
    for a in frames:
        buf = io.BytesIO()
        if fmt == "PNG":
            Image.fromarray(a).save(buf, format="PNG", compress_level=1)
        else:
            Image.fromarray(a).save(buf, format="JPEG", quality=95)
        out.append(buf.getvalue())
    return out


def hevc_clip(frames: list[np.ndarray], fps: int) -> bytes:
    from roboreel.compile.settings import CompileSettings
    from roboreel.compile.video import EncodeTarget, encode_clip

    src = (av.VideoFrame.from_ndarray(a, format="rgb24") for a in frames)
    return encode_clip(src, EncodeTarget(CompileSettings(), "bench", 0), length=len(frames), fps=fps).data


def rung_clip(frames: list[np.ndarray], fps: int, pix_fmt: str, crf: int | None) -> bytes:
    from roboreel.compile.settings import CompileSettings
    from roboreel.compile.video._imageclips import _encode

    h, w = frames[0].shape[:2]
    return _encode(frames, frames.__getitem__, fps=fps, settings=CompileSettings(), rung=(pix_fmt, crf),
                   size=(h, w), progress=None)


def ladder_clip(frames: list[np.ndarray], fps: int) -> tuple[bytes, str]:
    from roboreel.compile.settings import CompileSettings
    from roboreel.compile.video import encode_image_clip

    clip = encode_image_clip(encode_images(frames, "PNG"), key="bench", fps=fps, settings=CompileSettings(),
                             where="bench", episode=0)
    return clip.data, f"{clip.pix_fmt}" + (" lossless" if clip.crf is None else f" CRF {clip.crf}")


def decode_images_cpu_ms(encoded: list[bytes]) -> tuple[float, list[np.ndarray]]:
    t = time.process_time()
    out = [np.array(Image.open(io.BytesIO(b))) for b in encoded]
    return (time.process_time() - t) / len(encoded) * 1e3, out


def decode_clip_cpu_ms(data: bytes) -> tuple[float, list[np.ndarray]]:
    from torchcodec.decoders import VideoDecoder

    t = time.process_time()
    dec = VideoDecoder(data, seek_mode="approximate", num_ffmpeg_threads=1)
    out = [f.permute(1, 2, 0).numpy() for f in dec]
    return (time.process_time() - t) / len(out) * 1e3, out


def psnr_rgb(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mp4", help="a source video file")
    p.add_argument("--frames", type=int, default=150)
    p.add_argument("--sizes", nargs="+", default=["480x640", "96x96"], help="HxW to measure (resized with INTER_AREA)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fps", type=int, default=50)
    p.add_argument("--rungs", action="store_true", help="also each rung of the image-clip ladder alone")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    base = source_frames(args.mp4, args.frames)
    print(f"{len(base)} frames of {args.mp4} ({base[0].shape[0]}x{base[0].shape[1]}); CPU ms per decoded frame, "
          f"1 thread, median of {args.rounds} alternated rounds")
    for size in args.sizes:
        h, w = (int(x) for x in size.split("x"))
        frames = base if (h, w) == base[0].shape[:2] else [cv2.resize(a, (w, h), interpolation=cv2.INTER_AREA)
                                                           for a in base]
        variants = {"PNG": encode_images(frames, "PNG"), "JPEG q95": encode_images(frames, "JPEG")}
        clips = {"HEVC video defaults": hevc_clip(frames, args.fps)}
        if args.rungs:
            for pix_fmt in ("yuv420p", "yuv444p"):
                for crf in (24, 16, 12):
                    clips[f"{pix_fmt} CRF {crf}"] = rung_clip(frames, args.fps, pix_fmt, crf)
            clips["gbrp lossless"] = rung_clip(frames, args.fps, "gbrp", None)
        data, picked = ladder_clip(frames, args.fps)
        clips[f"--images clips ({picked})"] = data
        cpu: dict[str, list[float]] = {k: [] for k in [*variants, *clips]}
        decoded: dict[str, list[np.ndarray]] = {}
        for _ in range(args.rounds):
            for name, enc in variants.items():
                ms, decoded[name] = decode_images_cpu_ms(enc)
                cpu[name].append(ms)
            for name, clip in clips.items():
                ms, decoded[name] = decode_clip_cpu_ms(clip)
                cpu[name].append(ms)
        sizes = {name: sum(map(len, enc)) / len(enc) for name, enc in variants.items()}
        sizes |= {name: len(clip) / len(frames) for name, clip in clips.items()}
        print(f"\n{h}x{w}:")
        for name in cpu:
            ps = [psnr_rgb(a, b) for a, b in zip(frames, decoded[name], strict=True)]
            exact = all(np.array_equal(a, b) for a, b in zip(frames, decoded[name], strict=True))
            fid = "exact" if exact else f"PSNR mean {np.mean(ps):.2f} dB, lowest frame {min(ps):.2f} dB"
            print(f"  {name:34s} {sizes[name] / 1024:8.1f} KB/frame  decode {statistics.median(cpu[name]):7.3f} "
                  f"CPU ms/frame  {fid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
