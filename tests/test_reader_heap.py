"""The reader pins glibc's mmap threshold in every process that reads or decodes (reader/heap.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from roboreel.reader import CompiledDataset, heap

PROBE = r"""
import ctypes, sys
from roboreel.reader.heap import pin_mmap_threshold  # light: ctypes only, nothing allocated in the heap yet

class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MI
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "pinned":
    assert pin_mmap_threshold()
# Free one 4 MiB mmapped block: glibc's dynamic rule raises the threshold to 4 MiB, so a new 1 MiB block comes
# from the heap arena (and fragments it); pinned, it is mmapped and given back on free. hblkhd = mmapped bytes.
libc.free(libc.malloc(4 << 20))
before = libc.mallinfo2().hblkhd
p = libc.malloc(1 << 20)
print(libc.mallinfo2().hblkhd - before >= 1 << 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_pinning_keeps_large_blocks_out_of_the_heap_arena():
    def probe(mode: str) -> str:
        return subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120,
                              check=True).stdout.strip()

    assert probe("dynamic") == "False"  # glibc's default: the check can fail
    assert probe("pinned") == "True"


def test_iterating_and_dataloader_workers_pin_it(small_compiled):
    heap._done_in = None
    next(iter(CompiledDataset(str(small_compiled), shuffle=False)))
    assert heap._done_in == os.getpid()

    class Pids(torch.utils.data.IterableDataset):
        def __iter__(self):
            next(iter(CompiledDataset(str(small_compiled), shuffle=False)))
            yield heap._done_in == os.getpid()

    assert list(torch.utils.data.DataLoader(Pids(), batch_size=None, num_workers=2)) == [True, True]
