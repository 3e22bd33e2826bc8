"""Compile throughput: ``roboreel compile`` vs the ``ffmpeg`` CLI doing the same AV1 -> HEVC transcode.

The CLI side gets exactly the work the compiler's video path does: one ffmpeg process per episode x camera that
seeks to the episode's span, decodes it and encodes it with the same libx265 preset, CRF and x265 parameters
(single-threaded x265, as the compiler uses for byte-determinism), ``workers`` processes at a time. roboreel also
writes parquet, tars, sha256s and a PSNR sample, so the comparison is conservative for roboreel.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from roboreel.compile import CompileSettings, compile_dataset
from roboreel.formats.lerobot_v3 import LeRobotSource


def _ffmpeg_job(src: LeRobotSource, rel: str, start: float, frames: int, out: Path, s: CompileSettings,
                size: tuple[int, int]) -> None:
    cmd = [
        "ffmpeg", "-nostdin", "-v", "error", "-y", "-threads", "1",
        "-ss", f"{start:.6f}", "-i", src.path(rel), "-frames:v", str(frames), "-an",
        "-c:v", "libx265", "-preset", s.preset, "-crf", str(s.crf), "-x265-params", s.x265_params(height=size[0], width=size[1]),
        "-pix_fmt", "yuv420p", "-tag:v", "hvc1", "-f", "mp4", str(out),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ffmpeg failed on {rel} at {start}s: {r.stderr.strip()[-500:]}")


def _size(src: LeRobotSource, camera: str) -> tuple[int, int]:
    """(height, width) of a camera from info.json (shape [H, W, C] or [C, H, W])."""
    info = src.info.features[camera].get("info", {})
    if "video.height" in info:
        return int(info["video.height"]), int(info["video.width"])
    shape = src.info.features[camera]["shape"]
    return (int(shape[1]), int(shape[2])) if shape[0] in (1, 3) else (int(shape[0]), int(shape[1]))


def ffmpeg_transcode(source: str, settings: CompileSettings, *, workers: int) -> dict[str, Any]:
    """Transcode every episode x camera span with the ffmpeg CLI; frames/s over the whole job."""
    if shutil.which("ffmpeg") is None:
        raise RuntimeError("the ffmpeg CLI is not installed (apt-get install ffmpeg)")
    src = LeRobotSource(source)
    jobs = [(v.path, v.from_timestamp, e.length, _size(src, v.key)) for e in src.episodes for v in e.videos.values()]
    frames = sum(job[2] for job in jobs)
    with tempfile.TemporaryDirectory(prefix="roboreel-ffmpeg-") as tmp:
        t = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:  # threads only wait on ffmpeg processes
            futures = [pool.submit(_ffmpeg_job, src, rel, start, n, Path(tmp) / f"{i}.mp4", settings, size)
                       for i, (rel, start, n, size) in enumerate(jobs)]
            for f in futures:
                f.result()
        seconds = time.perf_counter() - t
    return {"tool": "ffmpeg", "workers": workers, "frames": frames, "seconds": seconds, "frames_per_s": frames / seconds}


def roboreel_transcode(source: str, settings: CompileSettings, *, workers: int) -> dict[str, Any]:
    """A full ``compile_dataset`` into a temp dir; frames/s counts every camera frame encoded."""
    src = LeRobotSource(source)
    frames = sum(e.length for e in src.episodes) * len(src.camera_keys)
    with tempfile.TemporaryDirectory(prefix="roboreel-compile-") as tmp:
        t = time.perf_counter()
        compile_dataset(source, str(Path(tmp) / "out"), settings=settings, workers=workers)
        seconds = time.perf_counter() - t
    return {"tool": "roboreel", "workers": workers, "frames": frames, "seconds": seconds,
            "frames_per_s": frames / seconds}


def compile_benchmark(source: str, *, settings: CompileSettings | None = None,
                      workers: tuple[int, ...] = (1, 2), repeats: int = 1) -> list[dict[str, Any]]:
    """Alternate roboreel and ffmpeg for each worker count; one dict per run, plus ratio rows."""
    s = settings or CompileSettings()
    s = replace(s, reencode=True)  # always measure the transcode, even for HEVC/H.264 sources
    if s.episodes_per_shard is None:
        # compile parallelises over shards: give every worker shards to work on, as a real (large) dataset does
        n = len(LeRobotSource(source).episodes)
        s = replace(s, episodes_per_shard=max(1, n // (2 * max(workers))))
    runs: list[dict[str, Any]] = []
    for w in workers:
        for r in range(repeats):
            for fn in (roboreel_transcode, ffmpeg_transcode):
                res = fn(source, s, workers=w)
                res.update(repeat=r, preset=s.preset, crf=s.crf, gop=s.gop, bframes=s.bframes)
                runs.append(res)
    return runs


def compile_ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median frames/s per tool and worker count, and roboreel / ffmpeg."""
    import statistics

    out = []
    for w in sorted({r["workers"] for r in runs}):
        med = {tool: statistics.median([r["frames_per_s"] for r in runs if r["workers"] == w and r["tool"] == tool])
               for tool in ("roboreel", "ffmpeg")}
        out.append({"workers": w, "roboreel_fps": med["roboreel"], "ffmpeg_fps": med["ffmpeg"],
                    "ratio": med["roboreel"] / med["ffmpeg"]})
    return out
