"""Measure resize filters against torchvision's ``resize(antialias=True)``: which filter compile uses.

For each decoded source frame (RGB, as LeRobot's decoders hand it out), the reference is torch's antialiased
bilinear interpolation of the uint8 RGB frame (what ``torchvision.transforms.v2.functional.resize(frame, [H, W],
antialias=True)`` runs on a uint8 tensor; ``--check-torchvision`` asserts the two are equal where torchvision
is installed). Candidates produce a yuv420p frame (what x265 gets), converted back to RGB the way a reader
does, and are scored by PSNR over the RGB frame (filter + 4:2:0 only; x265 adds its own loss on top):

- swscale ``area`` / ``bilinear`` / ``bicubic`` / ``lanczos`` on the yuv420p source planes (PyAV ``reformat``);
- ``torch``: decode to RGB, torch's antialiased interpolate, back to yuv420p (swscale).

With ``--compiled OUT`` (a ``--resize`` compile of SRC, any ``--fps``), it instead scores the compiled frames
end to end (filter + 4:2:0 + x265) against the reference of the kept source frames: every ``--stride``-th
sample, each camera.

Usage: python benchmarks/resize_filter_psnr.py SRC_DATASET --size 224x224 [--frames 60]
       python benchmarks/resize_filter_psnr.py SRC_DATASET --compiled OUT [--stride 5]
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import time

import av
import numpy as np
import torch

from roboreel.compile.video import resize_frame


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def reference(rgb: np.ndarray, h: int, w: int) -> np.ndarray:
    t = torch.from_numpy(rgb).permute(2, 0, 1)[None]
    return torch.nn.functional.interpolate(t, size=(h, w), mode="bilinear", antialias=True)[0].permute(1, 2, 0).numpy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--size", default="224x224")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--check-torchvision", action="store_true")
    ap.add_argument("--compiled", default=None)
    ap.add_argument("--stride", type=int, default=5)
    a = ap.parse_args()
    if a.compiled:
        return end_to_end(a.src, a.compiled, a.stride)
    h, w = (int(x) for x in a.size.lower().split("x"))
    files = sorted(glob.glob(os.path.join(a.src, "videos", "**", "*.mp4"), recursive=True))
    filters = ["area", "bilinear", "bicubic", "lanczos", "torch"]
    scores: dict[str, list[float]] = {f: [] for f in filters}
    secs: dict[str, float] = dict.fromkeys(filters, 0.0)
    per_file = max(1, a.frames // len(files))
    for path in files:
        with av.open(path) as c:
            for i, frame in enumerate(c.decode(video=0)):
                if i >= per_file:
                    break
                rgb = frame.to_ndarray(format="rgb24")
                ref = reference(rgb, h, w)
                if a.check_torchvision:
                    import torchvision.transforms.v2.functional as tvf  # only in the LeRobot venv

                    tv = tvf.resize(torch.from_numpy(rgb).permute(2, 0, 1), [h, w], antialias=True)
                    assert np.array_equal(tv.permute(1, 2, 0).numpy(), ref), "torchvision != torch interpolate"
                for f in filters:
                    t0 = time.perf_counter()
                    out = resize_frame(frame, h, w, f)
                    secs[f] += time.perf_counter() - t0
                    scores[f].append(_psnr(ref, out.to_ndarray(format="rgb24")))
    n = len(scores["area"])
    print(f"{n} frames from {len(files)} files, {frame.width}x{frame.height} -> {w}x{h}")
    for f in filters:
        s = scores[f]
        print(f"{f:9s} PSNR mean {np.mean(s):6.2f} dB  min {np.min(s):6.2f} dB  {1000 * secs[f] / n:6.2f} ms/frame")


def end_to_end(src: str, compiled: str, stride: int) -> None:
    """PSNR of compiled frames against the reference resize of the kept source frames (module doc)."""
    from roboreel.bench.reference import ReferenceDataset
    from roboreel.formats.lerobot_v3 import LeRobotSource
    from roboreel.reader import CompiledDataset

    ds = CompiledDataset(compiled, shuffle=False, return_uint8=True)
    step = LeRobotSource(src).fps // ds.meta.fps
    starts = {e.index: e.from_index for e in LeRobotSource(src).episodes}
    ref = ReferenceDataset(src, return_uint8=True)
    scores: dict[str, list[float]] = {}
    for n, s in enumerate(ds):
        if n % stride:
            continue
        want = ref[starts[int(s["episode_index"])] + int(s["frame_index"]) * step]
        for cam in ds.camera_keys:
            h, w = s[cam].shape[-2:]
            r = reference(want[cam].permute(1, 2, 0).numpy(), h, w)
            scores.setdefault(cam, []).append(_psnr(r, s[cam].permute(1, 2, 0).numpy()))
    for cam, v in scores.items():
        print(f"{cam}: {len(v)} frames, PSNR vs torchvision resize of the source frame: mean {np.mean(v):.2f} dB, "
              f"min {np.min(v):.2f} dB")


if __name__ == "__main__":
    main()
