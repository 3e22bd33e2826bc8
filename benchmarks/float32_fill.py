"""What a float32 batch costs beyond a uint8 one, per frame, where the decode threads write it: into batch arrays
that cycle as the loader's pool does (several batches of 32 frames, together far larger than the last-level
cache), against the same fill into one cache-hot frame and against writing the float32 bytes alone.

Why: at 224x224 a loader reads a frame's 150 KB of decoded pixels and writes 600 KB of float32, every batch to
fresh cache lines; timed on one hot frame the fill looks several times cheaper than it is in the loader. The
decode of the same clips (torchcodec, one thread, front to back, 32 frames a call) is timed in the same run, so
the float32 share of the decode ceiling this leaves is a ratio measured on one host at one time.

    python benchmarks/float32_fill.py data/aloha-224            # a compiled dataset: its first camera's clips
    python benchmarks/float32_fill.py data/aloha-224 --rounds 7 --batches 6
    python benchmarks/float32_fill.py data/aloha-224 --variants     # + other fills, each checked bit-equal
"""

from __future__ import annotations

import argparse
import io
import statistics
import tarfile
import time
from pathlib import Path

import numpy as np


def _clips(root: Path, limit: int) -> list[bytes]:
    """The first ``limit`` mp4 members of the dataset's shards (one camera's clips: the first key's)."""
    out: list[bytes] = []
    for tar in sorted((root / "shards").glob("*.tar")):
        with tarfile.open(tar) as t:
            for m in t:
                if m.name.endswith(".mp4") and len(out) < limit:
                    f = t.extractfile(m)
                    assert f is not None
                    out.append(f.read())
    return out


def _decode(clips: list[bytes]) -> tuple[list[np.ndarray], float]:
    """Every frame of ``clips`` as torchcodec's [C, H, W] views of channels-last memory, and the decode's ms a
    frame (one thread, 32 frames a call)."""
    import torch
    from torchcodec.decoders import VideoDecoder

    torch.set_num_threads(1)
    frames: list[np.ndarray] = []
    t0, n = time.process_time(), 0
    for data in clips:
        dec = VideoDecoder(io.BytesIO(data).getvalue(), seek_mode="exact")
        total = dec.metadata.num_frames
        for start in range(0, total, 32):
            batch = dec.get_frames_in_range(start, min(total, start + 32)).data
            n += batch.shape[0]
            frames += [f.numpy() for f in batch]
    return frames, (time.process_time() - t0) * 1e3 / n


def _time(fill, frames: list[np.ndarray], dsts: list[np.ndarray]) -> float:
    """CPU ms a frame of ``fill(src, dst_slot)`` over ``frames``, the slots cycling through ``dsts``' batches."""
    slots = [d[i] for d in dsts for i in range(d.shape[0])]
    t0 = time.process_time()
    for k, src in enumerate(frames):
        fill(src, slots[k % len(slots)])
    return (time.process_time() - t0) * 1e3 / len(frames)


def _variants() -> dict:
    """Other ways to fill a float32 slot with the same bits (checked in ``main``): per plane, so that each widened
    plane is divided while it is in cache; one cast-and-divide pass from the deinterleaved scratch; ``torch.div``
    from it (single-threaded)."""
    import torch

    from roboreel.reader.decode._pixels import _255, _scratch, copy_frame, unit_frame

    def per_plane(src: np.ndarray, dst: np.ndarray) -> None:
        tmp = _scratch(src.shape)
        copy_frame(src, tmp)
        for c in range(tmp.shape[0]):
            np.copyto(dst[c], tmp[c])
            np.divide(dst[c], _255, out=dst[c])

    def one_pass(src: np.ndarray, dst: np.ndarray) -> None:
        tmp = _scratch(src.shape)
        copy_frame(src, tmp)
        np.divide(tmp, _255, out=dst, dtype=np.float32)

    def torch_div(src: np.ndarray, dst: np.ndarray) -> None:
        tmp = _scratch(src.shape)
        copy_frame(src, tmp)
        torch.div(torch.from_numpy(tmp), 255.0, out=torch.from_numpy(dst))

    hot: dict[tuple[int, ...], np.ndarray] = {}

    def hot_then_copy(src: np.ndarray, dst: np.ndarray) -> None:
        f = hot.get(src.shape)
        if f is None:
            f = hot[src.shape] = np.empty(src.shape, np.float32)
        unit_frame(src, f)  # in a scratch that stays in cache
        np.copyto(dst, f)  # one contiguous copy: memcpy (rep movsb) into the cold slot

    return {"per plane": per_plane, "one pass": one_pass, "torch.div": torch_div, "hot then copy": hot_then_copy}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("compiled")
    p.add_argument("--clips", type=int, default=8)
    p.add_argument("--batches", type=int, default=6, help="batch arrays cycled (the loader's pool holds ~6)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", action="store_true", help="also time other fills with the same bits")
    args = p.parse_args()

    from roboreel.reader.decode._pixels import copy_frame, unit_frame

    clips = _clips(Path(args.compiled), args.clips)
    frames, _ = _decode(clips)
    shape = frames[0].shape
    u8 = [np.empty((args.batch_size, *shape), np.uint8) for _ in range(args.batches)]
    f32 = [np.empty((args.batch_size, *shape), np.float32) for _ in range(args.batches)]
    hot = [np.empty((1, *shape), np.float32)]
    for a in [*u8, *f32, *hot]:
        a.fill(0)  # faulted in, as the pool's arrays are in steady state

    def write_only(src: np.ndarray, dst: np.ndarray) -> None:
        dst.fill(0.5)

    variants = _variants() if args.variants else {}
    want, got = np.empty(shape, np.float32), np.empty(shape, np.float32)
    for name, fill in variants.items():  # the same bits as unit_frame, or the variant is not worth timing
        for src in frames[:: max(1, len(frames) // 16)]:
            unit_frame(src, want)
            fill(src, got)
            if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
                raise SystemExit(f"{name}: not the bits of unit_frame")
    rows: dict[str, list[float]] = {k: [] for k in ("decode", "uint8", "float32", "float32 hot", "float32 write",
                                                    *variants)}
    for _ in range(args.rounds):  # alternated, so a slower minute of the host shows in every row
        rows["decode"].append(_decode(clips)[1])
        rows["uint8"].append(_time(copy_frame, frames, u8))
        rows["float32"].append(_time(unit_frame, frames, f32))
        rows["float32 hot"].append(_time(unit_frame, frames, hot))
        rows["float32 write"].append(_time(write_only, frames, f32))
        for name, fill in variants.items():
            rows[name].append(_time(fill, frames, f32))
    h, w = shape[1], shape[2]
    print(f"{len(frames)} frames {h}x{w}, {args.batches} batch arrays of {args.batch_size} cycled "
          f"({args.batches * args.batch_size * 4 * np.prod(shape) / 2**20:.0f} MiB of float32), {args.rounds} rounds")
    for name, v in rows.items():
        print(f"  {name:14s} CPU ms/frame: median {statistics.median(v):.3f} (min {min(v):.3f}, max {max(v):.3f})")
    dec, extra = statistics.median(rows["decode"]), statistics.median(rows["float32"]) - statistics.median(rows["uint8"])
    print(f"  float32 beyond uint8: {extra:.3f} ms a frame, {100 * extra / dec:.0f}% of the decode's {dec:.3f}")


if __name__ == "__main__":
    main()
