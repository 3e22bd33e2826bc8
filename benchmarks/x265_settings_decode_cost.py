"""What x265 settings cost at decode time: CPU per decoded frame and PSNR, for roboreel's defaults and variants.

A compiled clip is decoded every epoch, so its decode cost matters more than its size. This re-encodes the first
``--frames`` frames of one source mp4 (e.g. the ALOHA footage of ``benchmarks/render_aloha.py``) with roboreel's x265
parameters and a few variants, then decodes each front to back with torchcodec on one thread (CPU time, medians of
``--rounds`` alternated rounds, so a shared machine's drift hits every variant alike) and computes PSNR over the
three yuv420p planes against the source decode (docs/format.md, "Encoding defaults").

    python benchmarks/x265_settings_decode_cost.py data/aloha/videos/observation.images.top/chunk-000/file-000.mp4
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time

import av
import numpy as np


def variants(base: str) -> dict[str, tuple[int, str]]:
    """name -> (crf, x265-params); ``base`` is roboreel's own parameter string with the filters on."""
    plain = base.replace(":no-deblock=1", "").replace(":no-sao=1", "")
    return {
        "filters on": (24, plain),
        "SAO off": (24, plain + ":no-sao=1"),
        "deblocking + SAO off": (24, plain + ":no-deblock=1:no-sao=1"),
        "CRF 28, filters on": (28, plain),
        "GOP 30, filters on": (24, plain.replace("keyint=10", "keyint=30")),
    }


def encode(frames: list[np.ndarray], width: int, height: int, crf: int, params: str) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        s = out.add_stream("libx265", rate=50)
        s.width, s.height, s.pix_fmt, s.codec_tag = width, height, "yuv420p", "hvc1"
        s.options = {"crf": str(crf), "preset": "veryfast", "x265-params": params}
        for i, a in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(a, format="yuv420p")
            frame.pts = i
            for p in s.encode(frame):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return buf.getvalue()


def psnr(frames: list[np.ndarray], data: bytes) -> tuple[float, float]:
    values = []
    with av.open(io.BytesIO(data)) as f:
        for a, frame in zip(frames, f.decode(video=0), strict=False):
            mse = np.mean((a.astype(np.float64) - frame.to_ndarray(format="yuv420p")) ** 2)
            values.append(10 * np.log10(255**2 / max(mse, 1e-10)))
    return float(np.mean(values)), float(np.min(values))


def decode_cpu_ms(data: bytes) -> float:
    from torchcodec.decoders import VideoDecoder

    t = time.process_time()
    dec = VideoDecoder(data, seek_mode="approximate", num_ffmpeg_threads=1)
    n = sum(1 for _ in dec)
    return (time.process_time() - t) / n * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mp4", help="a source video file")
    p.add_argument("--frames", type=int, default=600)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    import torch

    from roboreel.compile.settings import CompileSettings

    torch.set_num_threads(1)
    frames: list[np.ndarray] = []
    with av.open(args.mp4) as f:
        for frame in f.decode(video=0):
            frames.append(frame.to_ndarray(format="yuv420p"))
            if len(frames) >= args.frames:
                break
    height, width = frames[0].shape[0] * 2 // 3, frames[0].shape[1]
    base = CompileSettings(loop_filters=True).x265_params(height=height, width=width)
    clips = {name: encode(frames, width, height, crf, params) for name, (crf, params) in variants(base).items()}
    cpu: dict[str, list[float]] = {name: [] for name in clips}
    for _ in range(args.rounds):
        for name, data in clips.items():
            cpu[name].append(decode_cpu_ms(data))
    print(f"{len(frames)} frames of {width}x{height}; decode: torchcodec, 1 thread, median of {args.rounds} rounds")
    for name, data in clips.items():
        mean, low = psnr(frames, data)
        print(f"{name:22s} {len(data) / 1024:7.0f} KB  decode {statistics.median(cpu[name]):.3f} CPU ms/frame  "
              f"PSNR {mean:.2f} dB (lowest frame {low:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
