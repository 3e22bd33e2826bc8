"""Part exactness: every frame of every prepared clip decoded on NVDEC against the CPU decode of the same clip:
the same frames (pts), RGB PSNR, and how many frames torchcodec decoded on the CPU although cuda was asked.

With ``--cpu-only`` the GPU side is absent; the part then checks the harness itself: torchcodec's CPU decode
against an independent decode by PyAV (same pts, PSNR), written under ``exactness_cpu``.
"""

from __future__ import annotations

import io
import time

import numpy as np
import torch
from common import REAL, SMALL, clips, cuda_usable, finite, part_args, psnr, results


def _torchcodec(data: bytes, device: str) -> tuple[torch.Tensor, list[float], object]:
    from torchcodec.decoders import VideoDecoder

    dec = VideoDecoder(data, device=device, seek_mode="exact")
    batch = dec.get_frames_in_range(0, len(dec))
    return batch.data, [round(float(x), 6) for x in batch.pts_seconds], dec


def _pyav(data: bytes) -> tuple[torch.Tensor, list[float]]:
    import av

    with av.open(io.BytesIO(data)) as c:
        frames = list(c.decode(video=0))
    rgb = np.stack([f.to_ndarray(format="rgb24") for f in frames])
    return torch.from_numpy(rgb).permute(0, 3, 1, 2), [round(float(f.time), 6) for f in frames]


def main() -> None:
    a = part_args(__doc__)
    from roboreel.doctor.fallback import read_fallback_status

    ok, why = cuda_usable()
    gpu = ok and not a.cpu_only
    deadline = time.perf_counter() + a.seconds
    acc = {"clips": 0, "frames": 0, "fallback_frames": 0, "pts_equal": True, "psnr_min": float("inf"),
           "cut_short": False, "per_clip": []}
    if not gpu:
        results.merge(a.results, {}, reasons={k: f"needs NVDEC: {'--cpu-only run' if a.cpu_only else why}"
                                              for k in ("nvdec.frames", "nvdec.cpu_fallback_frames",
                                                        "nvdec.psnr_min_vs_cpu")})
    for ds in (REAL, SMALL):
        for name, data in clips(a.data / ds):
            if time.perf_counter() > deadline:
                acc["cut_short"] = True
                break
            cpu, cpu_pts, _ = _torchcodec(data, "cpu")
            if gpu:
                got, got_pts, dec = _torchcodec(data, "cuda")
                status = read_fallback_status(dec)
                fell_back = status is None or not status.known or status.fallback  # unknown is not NVDEC
                got = got.cpu()
                row = {"clip": f"{ds}/{name}", "frames": len(cpu_pts), "fallback": status.text if status else None}
            else:
                got, got_pts = _pyav(data)
                fell_back = False
                row = {"clip": f"{ds}/{name}", "frames": len(cpu_pts), "reference": "pyav"}
            same = got_pts == cpu_pts and got.shape == cpu.shape
            p = min((psnr(g, c) for g, c in zip(got, cpu, strict=True)), default=float("inf")) if same else 0.0
            row.update(pts_equal=got_pts == cpu_pts, psnr_min=finite(p))
            acc["per_clip"].append(row)
            acc["clips"] += 1
            acc["pts_equal"] &= got_pts == cpu_pts
            acc["psnr_min"] = min(acc["psnr_min"], p)
            acc["frames"] += len(cpu_pts)
            acc["fallback_frames"] += len(cpu_pts) if fell_back else 0
            _save(a, acc, gpu)  # after every clip: a crash or timeout keeps what was checked


def _save(a, acc: dict, gpu: bool) -> None:
    summary = {**acc, "psnr_min": finite(acc["psnr_min"])}
    if gpu:
        results.merge(a.results, {"nvdec.frames": acc["frames"] - acc["fallback_frames"],
                                  "nvdec.cpu_fallback_frames": acc["fallback_frames"],
                                  "nvdec.psnr_min_vs_cpu": summary["psnr_min"], "nvdec.pts_equal": acc["pts_equal"],
                                  "nvdec.exactness": summary})
    else:
        results.merge(a.results, {"exactness_cpu": summary})

if __name__ == "__main__":
    main()
