"""Two runs writing the same shards of one OUT: the second stops at once and touches nothing.

Before, a compile started twice into a new OUT (or a ``--part`` job resubmitted while the first still ran) had each
run's start-up sweep remove the other's temp files: both failed, and the one that found OUT new emptied it. A
real compile is paused (SIGSTOP) while it holds its shards, so the second run meets it every time.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.compiled import assert_same_tree
from test_compile import TEST

from roboreel.compile import compile_dataset
from roboreel.compile.out.paths import RUN_LOCK
from roboreel.formats.errors import RoboreelError
from roboreel.validate import validate


def _paused_compile(src: Path, out: Path, *extra: str) -> subprocess.Popen:
    """``roboreel compile SRC OUT`` in a subprocess, stopped once it holds its shards (it has opened RUN_LOCK and
    begun a shard)."""
    cmd = [sys.executable, "-c", "import sys; from roboreel.cli import main; sys.exit(main())", "compile", str(src),
           str(out), "--episodes-per-shard", "2", "--preset", "ultrafast", "--workers", "1", "--no-progress", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list((out / ".roboreel-parts").glob("clips/**/*.mp4*")) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signal.SIGSTOP)
    assert proc.poll() is None and (out / RUN_LOCK).exists(), proc.stderr.read() if proc.poll() else ""
    return proc


def _resume(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err


def test_a_second_compile_of_the_same_shards_stops_and_the_first_finishes(source_factory, tmp_path):
    src = source_factory("twice", episodes=6, min_length=30, max_length=40)
    reference = tmp_path / "reference"
    compile_dataset(str(src), str(reference), settings=TEST)
    out = tmp_path / "out"
    first = _paused_compile(src, out)
    try:
        before = sorted(p.relative_to(out) for p in out.rglob("*"))
        with pytest.raises(RoboreelError, match=f"another compile is writing its shards of {out} now"):
            compile_dataset(str(src), str(out), settings=TEST)
        with pytest.raises(RoboreelError, match="another compile is writing the shards of part 0/2"):
            compile_dataset(str(src), str(out), settings=TEST, part=(0, 2))
        with pytest.raises(RoboreelError, match="--overwrite would delete its files"):
            compile_dataset(str(src), str(out), settings=TEST, overwrite=True)
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing removed or added
    finally:
        _resume(first)
    assert_same_tree(reference, out)
    assert validate(str(out), deep=True).findings == []


def test_disjoint_parts_run_together(source_factory, tmp_path):
    src = source_factory("parts", episodes=8, min_length=30, max_length=40)
    reference = tmp_path / "reference"
    compile_dataset(str(src), str(reference), settings=TEST)
    out = tmp_path / "out"
    first = _paused_compile(src, out, "--part", "0/2")
    try:
        report = compile_dataset(str(src), str(out), settings=TEST, part=(1, 2))  # the other half: not blocked
        assert report.shards_compiled == 2 and not report.finalized
    finally:
        _resume(first)  # the last part to finish finalizes
    assert_same_tree(reference, out)
