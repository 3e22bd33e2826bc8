"""Does delivering YUV 4:2:0 and converting to RGB with torch ops beat torchcodec's CPU conversion?

Per frame, one thread, sequential decode of the same compiled clips, best of ``--repeats`` (the machine may be
shared). Four ways to get a frame:
- ``torchcodec rgb``: what roboreel does (FFmpeg decode + swscale to RGB24, one ``get_frames_in_range`` call);
- ``pyav decode only``: the decode alone (no conversion), the floor of any YUV path;
- ``pyav yuv planes``: decode + copying out the 4:2:0 planes (what a YUV wire format would ship);
- ``pyav yuv + torch rgb``: that + BT.601 limited-range conversion to RGB uint8 with torch ops on the CPU
  (chroma upsampled by repetition), i.e. the cost of converting where the batch lands when that is the CPU.
Also reports the largest difference of the torch conversion from torchcodec's RGB (in 1/255 steps).

    PYTHONPATH=. python benchmarks/yuv_vs_rgb_decode_cost.py COMPILED_DIR [--clips 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import sys
import time

import av
import torch
from torchcodec.decoders import VideoDecoder

from roboreel.bench.ceiling import compiled_clips


def yuv420_to_rgb(y: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """BT.601 limited range, 4:2:0 -> RGB uint8 [3, H, W] (chroma repeated 2x2), float32 arithmetic."""
    yf = (y.float() - 16.0) * (255.0 / 219.0)
    uf = (u.float() - 128.0).repeat_interleave(2, 0).repeat_interleave(2, 1)[: y.shape[0], : y.shape[1]]
    vf = (v.float() - 128.0).repeat_interleave(2, 0).repeat_interleave(2, 1)[: y.shape[0], : y.shape[1]]
    k = 255.0 / 224.0
    r = yf + 1.402 * k * vf
    g = yf - 0.344136 * k * uf - 0.714136 * k * vf
    b = yf + 1.772 * k * uf
    return torch.stack([r, g, b]).round_().clamp_(0, 255).to(torch.uint8)


def planes(frame: av.VideoFrame) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = frame.to_ndarray()  # yuv420p: [H * 3 / 2, W], the planes stacked, no conversion
    h, w = frame.height, frame.width
    y = a[:h]
    uv = a[h:].reshape(2, h // 2, w // 2)
    return torch.from_numpy(y.copy()), torch.from_numpy(uv[0].copy()), torch.from_numpy(uv[1].copy())


def run(clips: list[bytes], way: str) -> tuple[int, float]:
    n, t0 = 0, time.perf_counter()
    for data in clips:
        if way == "torchcodec rgb":
            dec = VideoDecoder(data, seek_mode="approximate", num_ffmpeg_threads=1)
            n += len(dec.get_frames_in_range(0, dec.metadata.num_frames).data)
            continue
        with av.open(io.BytesIO(data)) as f:
            f.streams.video[0].thread_count = 1
            for frame in f.decode(video=0):
                if way == "pyav yuv planes":
                    planes(frame)
                elif way == "pyav yuv + torch rgb":
                    yuv420_to_rgb(*planes(frame))
                n += 1
    return n, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("compiled")
    p.add_argument("--clips", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    clips = compiled_clips(a.compiled)[: a.clips]
    ways = ["torchcodec rgb", "pyav decode only", "pyav yuv planes", "pyav yuv + torch rgb"]
    best = {w: 0.0 for w in ways}
    for _ in range(a.repeats):  # alternated, best of: the machine may be shared
        for w in ways:
            n, s = run(clips, w)
            best[w] = max(best[w], n / s)
    dec = VideoDecoder(clips[0], seek_mode="approximate")
    want = dec.get_frames_in_range(0, 8).data
    with av.open(io.BytesIO(clips[0])) as f:
        got = torch.stack([yuv420_to_rgb(*planes(fr)) for _, fr in zip(range(8), f.decode(video=0), strict=False)])
    diff = (got.int() - want.int()).abs()
    h, w = want.shape[-2:]
    print(f"{len(clips)} clips, {h}x{w}, one thread, best of {a.repeats}:")
    for w_ in ways:
        print(f"  {w_:>22}: {best[w_]:7.0f} frames/s  ({1e3 / best[w_]:.2f} ms/frame)")
    print(f"  torch conversion vs torchcodec RGB: max |diff| {int(diff.max())}/255, "
          f"mean {float(diff.float().mean()):.2f}, {float((diff > 2).float().mean()):.1%} of values off by > 2")
    print(f"  bytes per frame: RGB {3 * h * w:,}, YUV 4:2:0 {h * w * 3 // 2:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
