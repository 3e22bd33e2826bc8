"""Reliability suite: bad inputs, kill -9 during compile, remote faults, fuzzing, integrity.

Tests marked ``slow`` (the full kill -9 sweep, long fuzz runs) are skipped unless ``ROBOREEL_SLOW=1`` is set
or the marker is selected (``-m slow``); the default run keeps a CI-sized version of each. See
docs/reliability.md.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def slow_enabled(config: pytest.Config) -> bool:
    return os.environ.get("ROBOREEL_SLOW") == "1" or "slow" in (config.getoption("markexpr", "") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if slow_enabled(config):
        return
    skip = pytest.mark.skip(reason="slow sweep: run with ROBOREEL_SLOW=1 or -m slow (docs/reliability.md)")
    for item in items:
        if item.get_closest_marker("slow") is not None and HERE in Path(item.path).parents:
            item.add_marker(skip)


@pytest.fixture()
def copy_of(tmp_path):
    """``copy_of(root, name)``: a writable copy of a (read-only, session-scoped) dataset under tmp_path."""

    def make(root: Path, name: str = "copy") -> Path:
        dst = tmp_path / name
        shutil.copytree(root, dst)
        return dst

    return make
