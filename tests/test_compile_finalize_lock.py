"""One finalize at a time in an OUT: the ``--part`` jobs of an array that finish together all finalize.

Each finalize removes the temp files a killed finalize left under the index; run together, one removed the temp
the other was about to rename, and that job failed (FileNotFoundError on the rename) though every shard was done.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.compiled import assert_same_tree

from roboreel.compile import finalize
from roboreel.compile.out.paths import FINALIZE_LOCK
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.manifest import MANIFEST_NAME

HOLD = """
import fcntl, sys
with open(sys.argv[1], "a+b") as f:
    fcntl.lockf(f, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin
"""


def test_finalize_waits_for_the_one_under_way_and_leaves_its_writes_alone(small_compiled, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(small_compiled, out)
    (out / MANIFEST_NAME).unlink()
    (out / "meta/info.json").unlink()
    # another job's finalize, under way: it holds the lock and is writing an index file
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / FINALIZE_LOCK)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        theirs = out / "index/.episodes-000.parquet.0123456789ab.tmp"
        theirs.write_bytes(b"being written")
        done = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                finalize(str(out))
            except BaseException as e:  # noqa: BLE001 - handed to the test's thread
                errors.append(e)
            done.set()

        t = threading.Thread(target=run)
        t.start()
        assert not done.wait(2.0), errors  # waits for the holder
        assert theirs.read_bytes() == b"being written"
        assert not (out / MANIFEST_NAME).exists() and not (out / "meta/info.json").exists()
        theirs.unlink()  # the holder renames its temp, then lets go
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    t.join(timeout=120)
    assert done.is_set() and errors == []
    assert_same_tree(out, small_compiled)


def test_finalize_lock_is_not_made_outside_a_compile(tmp_path):
    """A directory that holds no compile gets no ``.roboreel-parts`` from a mistaken ``--finalize``."""
    with pytest.raises(CompiledFormatError, match="not a roboreel compile output"):
        finalize(str(tmp_path))
    assert list(Path(tmp_path).iterdir()) == []
