"""Compile throughput and fidelity: ``roboreel compile`` vs the ``ffmpeg`` CLI doing the same AV1 -> HEVC transcode.

Both sides get the same work, in the same run, alternated (roboreel, ffmpeg, roboreel, ffmpeg, ...) for each
worker count, so a shared machine's noise hits both alike; medians are compared.

- roboreel: a full ``compile_dataset`` (re-encoding every camera) into a temp dir, ``--workers w``.
- ffmpeg CLI: ``w`` processes at a time, each ``-threads 1`` with the same libx265 preset, CRF and x265
  parameters (single-threaded x265, roboreel's determinism setting). ``unit="clip"`` (default): one process
  per episode x camera that seeks to the episode's span and transcodes exactly its frames, the clips roboreel
  makes. ``unit="file"``: one process per source mp4, the whole file (fewer process start-ups and seeks: the
  CLI's best case).

roboreel also writes parquet, tars, sha256s and checks every clip, so the comparison is conservative for it.
Its PSNR floor (a lower CRF for clips with a frame under 40 dB in RGB) is off unless ``settings`` turn it on:
with it the two sides would not do the same transcode.
Frames are counted in the outputs (packets), so both sides are credited only with frames they wrote.

Fidelity: PSNR (all three yuv420p planes, as ffmpeg's psnr filter "average") of every ``psnr_stride``-th frame
of every clip against the source decode of the same frame; reported as the mean over frames and the lowest and
mean per-clip means, for roboreel's clips and (``unit="clip"``) for ffmpeg's.
"""

from __future__ import annotations

import io
import resource
import statistics
import subprocess
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import av
import numpy as np

from roboreel.compile import CompileSettings, compile_dataset
from roboreel.compile.source import SourceVideo, camera_hw
from roboreel.compile.video import psnr
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.shard import CLIP_SUFFIX


@dataclass(frozen=True)
class CompileBenchConfig:
    workers: tuple[int, ...] = (1, 2)
    repeats: int = 2  # alternations per worker count
    unit: Literal["clip", "file"] = "clip"  # ffmpeg CLI: one process per episode x camera, or per source mp4
    psnr_stride: int = 1  # PSNR of every k-th frame (0: no PSNR)


@dataclass(frozen=True)
class Span:
    episode: int
    camera: str
    rel: str
    from_s: float
    length: int
    size: tuple[int, int]  # (height, width)


def spans(src: LeRobotSource) -> list[Span]:
    """Every episode x camera of the source, in compile order."""
    return [Span(e.index, cam, v.path, v.from_timestamp, e.length, camera_hw(src.info.features[cam]))
            for e in src.episodes for cam, v in e.videos.items()]


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and its reaped children: what a tool consumed, however
    busy the shared machine was (wall-clock throughput is what the tables report, this is the cross-check)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _packets(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for p in c.demux(c.streams.video[0]) if p.size)


def _ffmpeg(args: list[str], out: Path, s: CompileSettings, size: tuple[int, int]) -> None:
    cmd = [
        "ffmpeg", "-nostdin", "-v", "error", "-y", "-threads", "1", *args, "-an",
        "-c:v", "libx265", "-preset", s.preset, "-crf", str(s.crf),
        "-x265-params", s.x265_params(height=size[0], width=size[1]),
        "-pix_fmt", "yuv420p", "-tag:v", "hvc1", "-f", "mp4", str(out),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ffmpeg failed: {' '.join(cmd)}\n{r.stderr.strip()[-500:]}")


def ffmpeg_transcode(source: str, settings: CompileSettings, *, workers: int, unit: str = "clip",
                     keep: Path | None = None) -> dict[str, Any]:
    """The ffmpeg CLI side; ``keep``: a directory to leave the clips in (``<episode>.<camera>.mp4``)."""
    src = LeRobotSource(source)
    fps = src.fps
    if unit == "clip":
        # -ss half a frame early: input seeking then starts exactly at the span's first frame
        jobs = [(["-ss", f"{max(0.0, sp.from_s - 0.5 / fps):.6f}", "-i", src.path(sp.rel), "-frames:v",
                  str(sp.length)], f"{sp.episode:06d}.{sp.camera}.mp4", sp.size) for sp in spans(src)]
    elif unit == "file":
        files = {sp.rel: sp.size for sp in spans(src)}
        jobs = [(["-i", src.path(rel)], f"file-{i:04d}.mp4", size) for i, (rel, size) in enumerate(sorted(files.items()))]
    else:
        raise ValueError(f"unit must be 'clip' or 'file', got {unit!r}")
    with tempfile.TemporaryDirectory(prefix="roboreel-ffmpeg-") as tmp:
        where = keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        t, cpu = time.perf_counter(), _cpu_s()
        with ThreadPoolExecutor(workers) as pool:  # threads only wait on ffmpeg processes
            for f in [pool.submit(_ffmpeg, args, where / name, settings, size) for args, name, size in jobs]:
                f.result()
        seconds, cpu = time.perf_counter() - t, _cpu_s() - cpu
        frames = sum(_packets(where / name) for _, name, _ in jobs)
    return {"tool": "ffmpeg", "unit": unit, "workers": workers, "frames": frames, "seconds": seconds,
            "frames_per_s": frames / seconds, "cpu_s": cpu}


def roboreel_transcode(source: str, settings: CompileSettings, *, workers: int,
                       keep: Path | None = None) -> dict[str, Any]:
    """A full ``compile_dataset`` into a temp dir (or ``keep``); frames/s counts every camera frame written."""
    with tempfile.TemporaryDirectory(prefix="roboreel-compile-") as tmp:
        out = keep or Path(tmp) / "out"
        t, cpu = time.perf_counter(), _cpu_s()
        report = compile_dataset(source, str(out), settings=settings, workers=workers, overwrite=True)
        seconds, cpu = time.perf_counter() - t, _cpu_s() - cpu
        frames = sum(_packets_bytes(data) for _, data in compiled_clips(out))
    return {"tool": "roboreel", "workers": workers, "frames": frames, "seconds": seconds,
            "frames_per_s": frames / seconds, "cpu_s": cpu, "size_ratio": report.size_ratio,
            "shards": report.shards}


def _packets_bytes(data: bytes) -> int:
    with av.open(io.BytesIO(data)) as c:
        return sum(1 for p in c.demux(c.streams.video[0]) if p.size)


def compiled_clips(out: Path) -> list[tuple[tuple[int, str], bytes]]:
    """((episode, camera), clip bytes) of every clip in a compiled OUT's tars."""
    clips = []
    for tar_path in sorted((out / "shards").glob("*.tar")):
        with tarfile.open(tar_path) as tar:
            for m in tar:
                if m.name.endswith(CLIP_SUFFIX):
                    key, cam = m.name[: -len(CLIP_SUFFIX)].split(".", 1)
                    clips.append(((int(key), cam), tar.extractfile(m).read()))  # type: ignore[union-attr]
    return clips


# -- fidelity ---------------------------------------------------------------------------------------------
def _planes(frame: av.VideoFrame, size: tuple[int, int]) -> np.ndarray:
    if frame.format.name != "yuv420p" or (frame.height, frame.width) != size:
        frame = frame.reformat(width=size[1], height=size[0], format="yuv420p", interpolation="AREA")
    return frame.to_ndarray()


def clip_psnr(src: LeRobotSource, span: Span, clip: bytes | Path, *, stride: int) -> list[float]:
    """PSNR (dB) of every ``stride``-th frame of ``clip`` against the source decode of the same episode frame."""
    video = SourceVideo(src, span.rel, fps=src.fps, threads=0)
    out = []
    try:
        with av.open(io.BytesIO(clip) if isinstance(clip, bytes) else str(clip)) as c:
            decoded = c.decode(c.streams.video[0])
            for k, ref in enumerate(video.frames(span.from_s, span.length, episode=span.episode)):
                got = next(decoded, None)
                if got is None:
                    raise ValueError(f"clip of episode {span.episode} {span.camera} ends at frame {k}")
                if k % stride == 0:
                    test = got.to_ndarray()
                    out.append(min(psnr(_planes(ref, (got.height, got.width)), test), 100.0))
    finally:
        video.close()
    return out


def psnr_summary(per_clip: dict[tuple[int, str], list[float]]) -> dict[str, Any]:
    """Mean over every measured frame, and the lowest / mean per-clip mean (100 dB stands for identical)."""
    means = {k: float(np.mean(v)) for k, v in per_clip.items() if v}
    frames = [p for v in per_clip.values() for p in v]
    worst = min(means, key=means.__getitem__) if means else None
    return {
        "frames": len(frames), "clips": len(means),
        "mean_db": float(np.mean(frames)) if frames else None,
        "min_clip_mean_db": means[worst] if worst else None,
        "worst_clip": {"episode": worst[0], "camera": worst[1]} if worst else None,
        "min_frame_db": float(min(frames)) if frames else None,
    }


def _psnr_of(src: LeRobotSource, clips: dict[tuple[int, str], bytes | Path], stride: int) -> dict[str, Any]:
    by_key = {(sp.episode, sp.camera): sp for sp in spans(src)}
    return psnr_summary({k: clip_psnr(src, by_key[k], c, stride=stride) for k, c in clips.items()})


# -- the benchmark ----------------------------------------------------------------------------------------
def compile_benchmark(source: str, *, settings: CompileSettings | None = None,
                      config: CompileBenchConfig = CompileBenchConfig()) -> dict[str, Any]:
    """Alternate roboreel and ffmpeg for each worker count; returns runs, ratios and PSNR."""
    # always measure the transcode; by default without roboreel's PSNR floor (its lower-CRF re-encodes of some clips
    # would make the two sides' work differ): pass settings to measure it too
    s = replace(settings or CompileSettings(min_psnr=0.0), reencode=True)
    runs: list[dict[str, Any]] = []
    fidelity: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="roboreel-cbench-") as tmp:
        kept = {"roboreel": Path(tmp) / "roboreel", "ffmpeg": Path(tmp) / "ffmpeg"}
        for w in config.workers:
            for r in range(config.repeats):
                first = w == config.workers[0] and r == 0  # keep one run's outputs for the PSNR
                for tool in ("roboreel", "ffmpeg"):
                    keep = kept[tool] if first else None
                    if tool == "roboreel":
                        res = roboreel_transcode(source, s, workers=w, keep=keep)
                    else:
                        res = ffmpeg_transcode(source, s, workers=w, unit=config.unit, keep=keep)
                    res.update(repeat=r, preset=s.preset, crf=s.crf, gop=s.gop, bframes=s.bframes)
                    runs.append(res)
        if config.psnr_stride > 0:
            src = LeRobotSource(source)
            fidelity["roboreel"] = _psnr_of(src, dict(compiled_clips(kept["roboreel"])), config.psnr_stride)
            if config.unit == "clip":
                ff = {(int(p.name.split(".", 1)[0]), p.name.split(".", 1)[1][: -len(".mp4")]): p
                      for p in sorted(kept["ffmpeg"].glob("*.mp4"))}
                fidelity["ffmpeg"] = _psnr_of(src, ff, config.psnr_stride)
    return {"runs": runs, "ratios": compile_ratios(runs), "psnr": fidelity, "ffmpeg_version": _ffmpeg_version(),
            "unit": config.unit, "settings": s.to_dict()}


def compile_ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median frames/s per tool and worker count, roboreel / ffmpeg, roboreel's speed-up over 1 worker, and
    the median CPU milliseconds per frame of each tool."""
    out = []
    ws = sorted({r["workers"] for r in runs})

    def med(tool: str, w: int, key: str) -> float:
        return statistics.median([r[key] if key != "cpu_ms" else 1000 * r["cpu_s"] / r["frames"]
                                  for r in runs if r["workers"] == w and r["tool"] == tool])

    base = med("roboreel", 1, "frames_per_s") if 1 in ws else None
    for w in ws:
        fps = {tool: med(tool, w, "frames_per_s") for tool in ("roboreel", "ffmpeg")}
        out.append({"workers": w, "roboreel_fps": fps["roboreel"], "ffmpeg_fps": fps["ffmpeg"],
                    "ratio": fps["roboreel"] / fps["ffmpeg"], "speedup_vs_1": fps["roboreel"] / base if base else None,
                    "roboreel_cpu_ms_per_frame": med("roboreel", w, "cpu_ms"),
                    "ffmpeg_cpu_ms_per_frame": med("ffmpeg", w, "cpu_ms")})
    return out


def _ffmpeg_version() -> str:
    try:
        return subprocess.run(["ffmpeg", "-version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


def markdown(result: dict[str, Any]) -> str:
    """The tables docs/benchmarks.md shows."""
    lines = ["| workers | roboreel frames/s | ffmpeg CLI frames/s | roboreel / ffmpeg | roboreel speed-up vs 1 worker "
             "| CPU ms/frame roboreel | CPU ms/frame ffmpeg |", "|---|---|---|---|---|---|---|"]
    for r in result["ratios"]:
        up = f"{r['speedup_vs_1']:.2f}x" if r["speedup_vs_1"] else "n/a"
        lines.append(f"| {r['workers']} | {r['roboreel_fps']:.1f} | {r['ffmpeg_fps']:.1f} | **{r['ratio']:.2f}** | {up} "
                     f"| {r['roboreel_cpu_ms_per_frame']:.1f} | {r['ffmpeg_cpu_ms_per_frame']:.1f} |")
    if result["psnr"]:
        lines += ["", "| clips by | PSNR mean (dB) | lowest clip mean (dB) | lowest frame (dB) | frames measured |",
                  "|---|---|---|---|---|"]
        for tool, p in result["psnr"].items():
            if p["mean_db"] is not None:
                lines.append(f"| {tool} | {p['mean_db']:.2f} | {p['min_clip_mean_db']:.2f} | {p['min_frame_db']:.2f} "
                             f"| {p['frames']} |")
    return "\n".join(lines)
