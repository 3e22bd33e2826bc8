"""Minimal reproduction of the memory a torchcodec decoder leaves behind when opened and closed.

The reader opens one ``VideoDecoder`` per pooled clip from the clip's bytes and drops it when the episode leaves
the pool, so a long training run opens hundreds of thousands. This opens and closes decoders on the clips of a
compiled dataset (or on given mp4 files) in one process and prints RSS and glibc's heap figures as it goes, so
what a decoder leaves behind can be measured without the reader (docs/reliability.md, "Memory over long
training"). Run it under ``heaptrack`` to see the call stacks of what is never freed.

    python benchmarks/decoder_open_close_memory.py COMPILED_DIR --rounds 30 [--source bytes|tensor|file] [--decode] [--trim]
        [--pin] [--open-thread]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import io
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import torch
from torchcodec.decoders import VideoDecoder


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ["arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"]]


def clips(paths: list[Path]) -> list[bytes]:
    """Every mp4 member of the compiled shards under a directory, or the given mp4 files."""
    out = []
    for p in paths:
        if p.is_dir():
            for tar in sorted(p.rglob("*.tar")):
                with tarfile.open(tar) as tf:
                    out += [tf.extractfile(m).read() for m in tf.getmembers() if m.name.endswith(".mp4")]
        else:
            out.append(p.read_bytes())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="a compiled dataset directory or mp4 files")
    ap.add_argument("--rounds", type=int, default=20, help="times every clip is opened and closed")
    ap.add_argument("--source", choices=("bytes", "tensor", "file"), default="bytes",
                    help="what the decoder is created from")
    ap.add_argument("--decode", action="store_true", help="decode every third frame before closing")
    ap.add_argument("--trim", action="store_true", help="malloc_trim(0) after every close")
    ap.add_argument("--pin", action="store_true", help="pin glibc's mmap threshold at 128 KiB (reader/decode/_heap.py)")
    ap.add_argument("--open-thread", action="store_true",
                    help="create decoders on one dedicated thread (its own glibc arena); decode and close here")
    args = ap.parse_args()
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    if args.pin:
        libc.mallopt(-3, 128 * 1024)
    data = clips(args.paths)
    proc = psutil.Process()

    def report(label: str) -> None:
        m = libc.mallinfo2()
        print(f"{label:>8}  rss {proc.memory_info().rss / 2**20:8.2f} MB  heap in use {m.uordblks / 2**20:7.2f} MB"
              f"  heap free {m.fordblks / 2**20:7.2f} MB  heap from the system {m.arena / 2**20:7.2f} MB", flush=True)

    opener = ThreadPoolExecutor(1) if args.open_thread else None
    report("start")
    opens = 0
    for r in range(args.rounds):
        for clip in data:
            if args.source == "bytes":
                src: object = clip
            elif args.source == "tensor":
                src = torch.frombuffer(bytearray(clip), dtype=torch.uint8)
            else:
                src = io.BytesIO(clip)
            if opener is not None:
                dec = opener.submit(VideoDecoder, src, seek_mode="approximate").result()
            else:
                dec = VideoDecoder(src, seek_mode="approximate")
            if args.decode:
                dec.get_frames_at(list(range(0, dec.metadata.num_frames, 3)))
            del dec, src
            opens += 1
            if args.trim:
                libc.malloc_trim(0)
        gc.collect()
        if r % max(1, args.rounds // 10) == 0 or r == args.rounds - 1:
            report(str(opens))


if __name__ == "__main__":
    main()
