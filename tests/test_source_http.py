"""LeRobotSource over HTTP: a transient fault on meta/ is an I/O error, never "not a dataset" or "no stats"."""

from __future__ import annotations

import shutil

import pytest
from aiohttp import ClientResponseError
from support.httpserver import Faults, FaultyServer

from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import STATS_PATH, LeRobotSource


def test_info_503_is_an_io_error_and_a_retry_reads_it(small_source) -> None:
    faults = Faults(unavailable=1.0, path_prefix="/meta/info.json", max_faults=1)
    with FaultyServer(small_source, faults=faults) as server:
        src = LeRobotSource(server.url)
        with pytest.raises(ClientResponseError, match="503"):
            _ = src.info
        assert src.info.fps == LeRobotSource(str(small_source)).info.fps  # nothing cached from the fault


def test_stats_503_is_not_read_as_missing(small_source) -> None:
    faults = Faults(unavailable=1.0, path_prefix="/meta/stats.json", max_faults=2)
    with FaultyServer(small_source, faults=faults) as server:
        src = LeRobotSource(server.url)
        with pytest.raises(ClientResponseError, match="503"):
            _ = src.stats
    with FaultyServer(small_source) as server:
        assert LeRobotSource(server.url).stats == LeRobotSource(str(small_source)).stats is not None


def test_missing_info_and_stats_over_http(small_source, tmp_path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(small_source, copy)
    (copy / STATS_PATH).unlink()
    with FaultyServer(copy) as server:
        assert LeRobotSource(server.url).stats is None
    (copy / "meta" / "info.json").unlink()
    with FaultyServer(copy) as server, pytest.raises(SourceError, match="not a LeRobot v3 dataset"):
        _ = LeRobotSource(server.url).info
