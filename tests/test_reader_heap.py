"""The reader pins glibc's mmap threshold in every process that reads or decodes (reader/decode/_heap.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from roboreel.reader import CompiledDataset
from roboreel.reader.decode import _heap as heap


@pytest.fixture()
def unpinned():
    """This process with no threshold on record, as a fresh one; afterwards the threshold it had is pinned again
    (glibc's and the record both), so later tests in the process meet what they would have met."""
    before = heap._done_in
    heap._done_in = None
    yield
    heap._done_in = None
    if before is not None and before[0] == os.getpid():
        assert heap.pin_mmap_threshold(before[1])


# The probes load heap's one file alone (it imports only the standard library): importing it through the package
# would bring torch and torchcodec in first (seconds of start-up, and their allocations in the heap being probed).
LOAD_HEAP = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("heap", sys.argv[1])
heap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(heap)
"""
PROBE = LOAD_HEAP + r"""
import ctypes
pin_mmap_threshold = heap.pin_mmap_threshold

class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MI
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[2] == "pinned":
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
        return subprocess.run([sys.executable, "-c", PROBE, heap.__file__, mode], capture_output=True, text=True,
                              timeout=120, check=True).stdout.strip()

    assert probe("dynamic") == "False"  # glibc's default: the check can fail
    assert probe("pinned") == "True"


def test_iterating_and_dataloader_workers_pin_it(small_compiled, unpinned):
    next(iter(CompiledDataset(str(small_compiled), shuffle=False)))
    assert heap._done_in == (os.getpid(), heap.MMAP_THRESHOLD_BYTES)

    class Pids(torch.utils.data.IterableDataset):
        def __iter__(self):
            next(iter(CompiledDataset(str(small_compiled), shuffle=False)))
            yield heap._done_in == (os.getpid(), heap.MMAP_THRESHOLD_BYTES)

    assert list(torch.utils.data.DataLoader(Pids(), batch_size=None, num_workers=2)) == [True, True]


def test_the_decode_stage_sets_its_own_threshold(small_compiled, unpinned):
    """roboreel.loader's process decodes whole runs of frames: its threshold is the larger decode one, and the
    dataset's undecoded stream (iter_pending, num_workers=0) does not reset it to the workers' value."""
    from roboreel.reader.loader import loader

    it = loader(CompiledDataset(str(small_compiled), shuffle=False), batch_size=4, num_workers=0)
    try:
        next(iter(it))
        assert heap._done_in == (os.getpid(), heap.DECODE_MMAP_THRESHOLD_BYTES)
    finally:
        it.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_the_c_library_is_looked_up_once(monkeypatch, unpinned):
    """``ctypes.util.find_library`` runs ``ldconfig -p`` in a subprocess: the heap helpers look glibc up once per
    process, not at every epoch end."""
    import ctypes.util

    calls = []
    real = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: calls.append(name) or real(name))
    heap._libc.cache_clear()
    try:
        for _ in range(3):
            assert heap.trim_heap()
        assert heap.pin_mmap_threshold()
        assert calls == ["c"]
    finally:
        heap._libc.cache_clear()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_an_in_process_loader_epoch_trims_the_heap_once(small_compiled, monkeypatch):
    """With ``num_workers=0`` the dataset's undecoded stream and the decode stage end each epoch in the same
    process: only the stage, after its decoders are closed, gives the free pages back (one ``malloc_trim`` an
    epoch, ~2-4 ms of CPU each). Iterating the dataset itself still trims at its end."""
    from roboreel.reader.loader import _stage as loader_stage
    from roboreel.reader.loader import loader

    trims = []

    def counted() -> bool:
        trims.append(1)
        return True

    monkeypatch.setattr(heap, "trim_heap", counted)
    monkeypatch.setattr(loader_stage, "trim_heap", counted)
    ds = CompiledDataset(str(small_compiled), shuffle=False)
    it = loader(ds, batch_size=4, num_workers=0)
    try:
        for epoch in range(2):
            n = sum(1 for _ in it)
            assert n > 0 and len(trims) == epoch + 1
    finally:
        it.close()
    trims.clear()
    assert sum(1 for _ in ds) > 0 and len(trims) == 1


ARENA_PROBE = LOAD_HEAP + r"""
import ctypes
in_side_arena = heap.in_side_arena

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]

def non_main_arena(p):  # glibc chunk header: the size word before the block carries NON_MAIN_ARENA (0x4)
    return bool(ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value & 4)

print(non_main_arena(libc.malloc(48)), non_main_arena(in_side_arena(libc.malloc, 48)))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_side_arena_allocations_come_from_another_arena():
    def probe(env: dict[str, str]) -> str:
        return subprocess.run([sys.executable, "-c", ARENA_PROBE, heap.__file__], capture_output=True, text=True,
                              timeout=120, check=True, env={**os.environ, **env}).stdout.strip()

    assert probe({}) == "False True"
    assert probe({"MALLOC_ARENA_MAX": "1"}) == "False False"  # one arena for all threads: documented limit


def test_side_arena_returns_and_raises_in_the_caller():
    import threading

    assert heap.in_side_arena(threading.current_thread) is not threading.current_thread()
    assert heap.in_side_arena(int, "42") == 42
    with pytest.raises(ValueError, match="invalid literal"):
        heap.in_side_arena(int, "x")


def test_decoders_are_opened_on_the_side_thread_in_each_worker(small_compiled):
    import threading

    class Sides(torch.utils.data.IterableDataset):
        def __iter__(self):
            sample = next(iter(CompiledDataset(str(small_compiled), shuffle=False)))
            names = {t.name.split("_")[0] for t in threading.enumerate()}
            yield sample["index"].item() >= 0 and heap._side[0] == os.getpid() and "roboreel-side-arena" in names

    assert list(torch.utils.data.DataLoader(Sides(), batch_size=None, num_workers=2)) == [True, True]
