"""Write errors during compile, on real filesystems: a tmpfs too small for OUT (every size from "nothing fits" to
"just fits", so the disk fills during the shards, between them and during finalize) and a read-only one.

Each failure is one line naming the error and OUT, exit 2, and leaves only whole files (no temps); after the space
is freed the same command resumes and finishes, byte for byte the compile that never failed, and validates clean.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roboreel.cli import main

from .trees import assert_same_tree, temp_files, trusted_files_are_whole

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None,
                                reason="mounting a tmpfs needs root (CI runs as root)")
ARGS = ["--no-progress", "--workers", "1", "--episodes-per-shard", "1", "--preset", "ultrafast"]


def _mount(path: Path, *options: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=" + options[0], *options[1:])), "tmpfs", str(path)],
                   check=True)


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True)


def _compile(src: Path, out: Path) -> subprocess.CompletedProcess:
    """The CLI in a process of its own, as a user runs it (its stderr is what they read)."""
    return subprocess.run([sys.executable, "-m", "roboreel.cli", "compile", str(src), str(out), *ARGS],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def reference(small_source, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "out"
    assert main(["compile", str(small_source), str(out), *ARGS]) == 0
    return out


@pytest.mark.slow  # ~25 s: CI's slow stage runs it
def test_a_full_disk_at_any_point_fails_in_one_line_and_a_rerun_finishes(small_source, reference, tmp_path):
    need = sum(p.stat().st_size for p in reference.rglob("*") if p.is_file())
    mnt, failures = tmp_path / "mnt", []
    # tmpfs counts whole 4 KiB pages: from a third of what OUT holds up to where it fits
    for kib in range(max(16, need // 3072), need // 1024 * 3, 32):
        _mount(mnt, f"{kib}k")
        try:
            out = mnt / "out"
            run = _compile(small_source, out)
            if run.returncode == 0:
                assert_same_tree(out, reference)
                break
            lines = run.stderr.strip().splitlines()
            assert run.returncode == 2 and len(lines) == 1, run.stderr
            assert "No space left on device" in lines[0] and str(out) in lines[0], lines[0]
            assert temp_files(out) == [] and trusted_files_are_whole(out) == []
            failures.append(lines[0])
            subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)  # the space freed
            again = _compile(small_source, out)
            assert again.returncode == 0, again.stderr
            assert_same_tree(out, reference)
            assert main(["validate", str(out)]) == 0
        finally:
            _umount(mnt)
    else:
        pytest.fail(f"OUT never fitted in {kib} KiB")
    # during the shards (whole ones kept for the rerun), and with every shard written, during the index and meta/
    assert any("finished shards and clips stay in" in f and "a rerun resumes" in f for f in failures)
    assert any("finalize stopped by" in f for f in failures)


def test_a_read_only_out_fails_naming_it(small_source, tmp_path):
    mnt = tmp_path / "ro"
    _mount(mnt, "4m")
    try:
        (mnt / "out").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        run = _compile(small_source, mnt / "out")
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1, run.stderr
        assert "Read-only file system" in lines[0] and str(mnt / "out") in lines[0], lines[0]
        assert not any(p.is_file() for p in mnt.rglob("*"))
    finally:
        _umount(mnt)


def test_no_permission_on_out_fails_naming_it_and_a_rerun_finishes(small_source, reference, tmp_path):
    """OUT inside a folder the user may not write: root ignores file modes, so the compile runs as root without the
    capabilities that override them (what an unprivileged user has), fails in one line naming OUT, writes nothing,
    and once the folder is writable the same command finishes."""
    parent = tmp_path / "locked"
    parent.mkdir()
    (parent / "out").mkdir()
    (parent / "out").chmod(0o555)
    drop = "-dac_override,-dac_read_search,-fowner"
    cmd = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", sys.executable, "-m", "roboreel.cli",
           "compile", str(small_source), str(parent / "out"), *ARGS]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1, run.stderr
        assert "Permission denied" in lines[0] and str(parent / "out") in lines[0], lines[0]
        assert list((parent / "out").rglob("*")) == []
    finally:
        (parent / "out").chmod(0o755)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert_same_tree(parent / "out", reference)
