"""Compiling a remote source through transient faults: the LeRobot source served over http:// from 127.0.0.1 by
the fault-injecting server (tests/support/httpserver.py: 503s, connection resets, truncated bodies).

Faults a retry fixes must not change a byte of the output; a file that keeps failing stops the compile with an
error naming it, keeps every finished shard and clip (even in a new OUT) and the same command resumes; a missing
or corrupt file is a data fault, never retried.
"""

from __future__ import annotations

import shutil
import time

import pytest
from reliability import damage as D
from reliability.trees import assert_same_tree
from support.httpserver import Faults, FaultyServer

from roboreel.compile import CompileSettings, compile_dataset
from roboreel.formats.errors import SourceError, SourceReadError
from roboreel.formats.lerobot_v3 import LeRobotSource

TEST = CompileSettings.for_tests()  # 2 episodes per shard: small_source gives shards [0,1] [2,3] [4,5] [6,7]


@pytest.fixture()
def copy_of(tmp_path):
    """A writable copy of a (read-only, session-scoped) dataset, to break."""
    return lambda root, name="copy": shutil.copytree(root, tmp_path / name)


def test_faults_on_every_remote_file_are_retried_and_change_nothing(small_source, small_compiled, tmp_path):
    """The first two GETs of every file (meta/, data parquet, mp4) fail with a 503, a reset or a truncated body,
    read by the parent (meta, schemas) and by a spawned worker and the in-process thread (rows, video)."""
    faults = Faults(unavailable=0.4, reset=0.3, truncate=0.3, seed=1, max_faults_per_path=2)
    out = tmp_path / "out"
    with FaultyServer(small_source, faults=faults) as server:
        report = compile_dataset(server.url, str(out), settings=TEST, workers=2, backoff_s=0.01)
        faulted = {r.path for r in server.log if r.fault}
        kinds = server.faults_injected()
    assert report.finalized
    assert_same_tree(out, small_compiled, ignore_source=True)  # the source entry names the URL
    assert {"/meta/info.json", "/meta/tasks.parquet"} <= faulted
    assert any(p.startswith("/meta/episodes/") for p in faulted)
    src = LeRobotSource(str(small_source))
    files = {f"/{e.data_path}" for e in src.episodes} | {f"/{v.path}" for e in src.episodes for v in e.videos.values()}
    assert files <= faulted  # every data parquet and every mp4
    assert set(kinds) == {"unavailable", "reset", "truncate"}


@pytest.mark.parametrize("kind", ["data", "video"])
def test_a_missing_file_is_not_retried(small_source, copy_of, tmp_path, kind):
    root = copy_of(small_source, "src")
    ep = LeRobotSource(str(root)).episodes[-1]
    rel = ep.data_path if kind == "data" else next(iter(ep.videos.values())).path
    (root / rel).unlink()
    out = tmp_path / "out"
    with FaultyServer(root) as server:
        t0 = time.perf_counter()
        with pytest.raises(SourceError, match="missing file") as err:
            compile_dataset(server.url, str(out), settings=TEST, retries=5, backoff_s=2.0)
        seconds = time.perf_counter() - t0
        gets = [r for r in server.log if r.method == "GET" and r.path == f"/{rel}"]
    assert not isinstance(err.value, SourceReadError) and err.value.file == rel
    assert [r.status for r in gets] == [404]  # fsspec's HEAD, then one GET; no retry
    assert seconds < 2.0 and not out.exists()


def test_a_corrupt_video_is_a_data_fault_not_retried(small_source, copy_of, tmp_path):
    """Bad bytes come back the same on every read: no retry, the usual error, and a new OUT is removed."""
    root = copy_of(small_source, "src")
    fault = D.garbage_mid_mp4(root)
    out = tmp_path / "out"
    with FaultyServer(root) as server:
        with pytest.raises(SourceError, match="cannot decode video|video skips frames") as err:
            compile_dataset(server.url, str(out), settings=TEST, retries=5, backoff_s=2.0)
        gets = [r for r in server.log if r.method == "GET" and r.path == f"/{fault.file}"]
    assert not isinstance(err.value, SourceReadError)
    assert (err.value.file, err.value.episode) == (fault.file, fault.episodes[0])
    assert len(gets) == 1 and not out.exists()
