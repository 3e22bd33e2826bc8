"""Test data built once per run and shared by every pytest-xdist process.

A run-wide fixture runs once per xdist process, so each process used to build (and compile) the same synthetic
datasets. pytest-xdist's documented pattern avoids that: build into the run's common base directory (the parent
of each process's ``getbasetemp()``) under a file lock; the first process builds, the others wait and reuse it.
The data is read-only to the tests that get it (they copy before changing), as it was within one process.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def built_once(tmp_path_factory: Any, kind: str, key: tuple, build: Callable[[Path], Path]) -> Path:
    """``build(folder)`` -> the path it made inside ``folder``, run once per test run for ``(kind, key)``;
    every later call (in any process) gets the same path."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    name = f"{kind}-{hashlib.sha1(repr(key).encode()).hexdigest()[:16]}"
    folder, done = base / "shared" / name, base / "shared" / f"{name}.done"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(base / "shared" / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or its process dies)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a process killed mid-build left
            folder.mkdir()
            done.write_text(str(build(folder).relative_to(folder)))
        return folder / done.read_text()
