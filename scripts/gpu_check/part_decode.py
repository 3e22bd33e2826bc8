"""Part decode: frames/s of plain torchcodec decoding whole clips, NVDEC with 1..N threads against the CPU with
one thread per core (each CPU decoder single-threaded, as the loader's decode pool runs them), at 480x640 and
224x224. Every thread decodes whole clips, 32 frames per call (a batch's worth; bounds memory), round robin over
the prepared clips, for ``--seconds`` per setting; frames are counted once the call returned them (NVDEC: after a
stream synchronise)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch
from common import REAL, SMALL, clips, cores, cuda_usable, part_args, results

CHUNK = 32


def _decode_clip(data: bytes, device: str) -> int:
    from torchcodec.decoders import VideoDecoder

    dec = VideoDecoder(data, device=device, seek_mode="approximate", num_ffmpeg_threads=1)
    n = len(dec)
    for i in range(0, n, CHUNK):
        dec.get_frames_in_range(i, min(n, i + CHUNK))
    if device != "cpu":
        torch.cuda.current_stream().synchronize()
    return n


def rate(work: Callable[[bytes], int], items: list[bytes], threads: int, seconds: float) -> dict:
    """frames/s of ``threads`` threads calling ``work`` on distinct items (round robin) for ``seconds``."""
    stop = time.perf_counter() + seconds
    counts, errors = [0] * threads, []

    def loop(i: int) -> None:
        j = i
        try:
            while time.perf_counter() < stop:
                counts[i] += work(items[j % len(items)])
                j += threads
        except Exception as e:  # one thread's error is recorded; the others go on
            errors.append(f"{type(e).__name__}: {e}"[:300])

    t0 = time.perf_counter()
    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return {"threads": threads, "fps": round(sum(counts) / wall, 1), "frames": sum(counts),
            "seconds": round(wall, 2), "errors": errors[:2]}


def call_cost(items: list[bytes], device: str, frames_per_call: int, seconds: float) -> dict:
    """One thread walking each clip front to back in calls of ``frames_per_call`` frames (one open decoder per
    clip, no seeks): wall and CPU ms per frame. The loader asks NVDEC for ~2 frames per clip and batch when a
    batch holds many clips (14 a batch of 32 on ``many``) against 32 when it holds one (``main``, 8 workers); on the
    first H200 run that case cost 7x the CPU per sample, and this is whether calls that small are why."""
    from torchcodec.decoders import VideoDecoder

    stop, frames, calls = time.perf_counter() + seconds, 0, 0
    t0, c0 = time.perf_counter(), time.process_time()
    j = 0
    while time.perf_counter() < stop:
        dec = VideoDecoder(items[j % len(items)], device=device, seek_mode="approximate", num_ffmpeg_threads=1)
        n = len(dec)
        for i in range(0, n, frames_per_call):
            dec.get_frames_at(list(range(i, min(n, i + frames_per_call))))
            frames, calls = frames + min(n, i + frames_per_call) - i, calls + 1
        if device != "cpu":
            torch.cuda.current_stream().synchronize()
        j += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"device": device, "frames_per_call": frames_per_call, "frames": frames, "calls": calls,
            "wall_ms_per_frame": round(1e3 * wall / max(frames, 1), 3),
            "cpu_ms_per_frame": round(1e3 * cpu / max(frames, 1), 3)}


def main() -> None:
    a = part_args(__doc__)
    ok, why = cuda_usable()
    gpu = ok and not a.cpu_only
    n = cores()
    for ds in (REAL, SMALL):
        items = [b for _, b in clips(a.data / ds)]
        _decode_clip(items[0], "cpu")  # warm: libraries loaded, first-call costs out of the window
        cpu = [rate(lambda b: _decode_clip(b, "cpu"), items, t, a.seconds) for t in sorted({1, n})]
        results.merge(a.results, {f"decode.{ds}.cpu": cpu})
        if ds == REAL:
            results.merge(a.results, {"decode.cpu_fps_all_cores": cpu[-1]["fps"]})
        if not gpu:
            continue
        from torchcodec.decoders import VideoDecoder

        from roboreel.doctor.fallback import read_fallback_status

        probe = VideoDecoder(items[0], device="cuda")
        probe[0]
        status = read_fallback_status(probe)
        if status is None or not status.known or status.fallback:  # a CPU decode's rate is no NVDEC rate
            why = f"torchcodec did not decode on NVDEC: {status.text if status else 'no cpu_fallback to read'}"
            results.merge(a.results, {f"decode.{ds}.nvdec": None}, reasons={f"decode.{ds}.nvdec": why})
            gpu = False
            continue
        _decode_clip(items[0], "cuda")
        nv = []
        for t in (1, 2, 4, 8, 16):
            if t > max(n, 1) * 2:
                break
            nv.append(rate(lambda b: _decode_clip(b, "cuda"), items, t, a.seconds))
            results.merge(a.results, {f"decode.{ds}.nvdec": nv})
        if ds == REAL:
            best = max(nv, key=lambda r: r["fps"])
            results.merge(a.results, {"decode.nvdec_fps": best["fps"], "decode.nvdec_best_threads": best["threads"]})
            results.merge(a.results, {"decode.call_cost": [call_cost(items, dev, k, a.seconds / 2)
                                                           for dev in ("cuda", "cpu") for k in (2, 32)]})
    if not gpu:
        results.merge(a.results, {}, reasons={"decode.nvdec_fps": "needs NVDEC: " + (
            "--cpu-only run" if a.cpu_only else why if not ok else "torchcodec fell back to the CPU (decode.*.nvdec)")})


if __name__ == "__main__":
    main()
