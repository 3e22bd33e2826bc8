"""Compiling a remote source through transient faults: the LeRobot source served over http:// from 127.0.0.1 by
the fault-injecting server (tests/support/httpserver.py: 503s, connection resets, truncated bodies).

Faults a retry fixes must not change a byte of the output; a file that keeps failing stops the compile with an
error naming it, keeps every finished shard and clip (even in a new OUT) and the same command resumes; a missing
or corrupt file is a data fault, never retried.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time

import pytest
from reliability import damage as D
from reliability.trees import assert_same_tree, temp_files, trusted_files_are_whole
from support.httpserver import Faults, FaultyServer
from support.settings import FAST

from roboreel.cli import main
from roboreel.compile import compile_dataset
from roboreel.compile.source import SourceVideo
from roboreel.formats.errors import SourceError, SourceReadError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import MANIFEST_NAME
from roboreel.formats.transient import Retry, RetryingFile

TEST = FAST  # 2 episodes per shard: small_source gives shards [0,1] [2,3] [4,5] [6,7]


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
        report = compile_dataset(server.url, str(out), settings=TEST, workers=2, retry=Retry(backoff_s=0.01))
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


def test_retries_in_spawned_workers_are_logged_by_the_parent_like_its_own(small_source, small_compiled, tmp_path,
                                                                         caplog):
    """A worker process sends its log records to the parent (compile/jobs/_worklog.py): a read retried in a spawned
    worker is logged at INFO by formats.transient through the parent's handlers (here caplog), as one retried in
    the parent is. 80% of requests fail (no backoff, a budget that cannot run out), so every process retries."""
    caplog.set_level(logging.INFO, logger="roboreel.formats.transient")
    out = tmp_path / "out"
    with FaultyServer(small_source, faults=Faults(unavailable=0.8, seed=2)) as server:
        report = compile_dataset(server.url, str(out), settings=TEST, workers=2, retry=Retry(100, 0.0))
    assert report.finalized
    assert_same_tree(out, small_compiled, ignore_source=True)
    retried = [r for r in caplog.records if r.name == "roboreel.formats.transient" and r.levelno == logging.INFO]
    assert retried and all(re.match(r"retrying (meta|data|videos)/.* after HTTP 503", r.getMessage())
                           for r in retried)
    by_worker = [r for r in retried if r.process != os.getpid()]
    assert any(r.process == os.getpid() for r in retried)  # the parent's own (meta/, sizes) and its thread's
    assert by_worker and all(r.processName.startswith("SpawnProcess") for r in by_worker)


def test_a_file_failing_beyond_the_budget_stops_naming_it_and_a_rerun_resumes(small_source, small_compiled,
                                                                             tmp_path, capsys):
    src = LeRobotSource(str(small_source))
    last = src.episodes[-1]
    video = last.videos[src.camera_keys[-1]].path  # read after the first camera's clip of its first episode
    out = tmp_path / "out"
    args = ["compile", "", str(out), "--preset", "ultrafast", "--episodes-per-shard", "2", "--workers", "1",
            "--no-progress", "--retries", "2", "--backoff-s", "0.01"]
    with FaultyServer(small_source, faults=Faults(unavailable=1.0, path_prefix=f"/{video}")) as server:
        args[1] = server.url
        assert main(args) == 2
        gets = [r for r in server.log if r.method == "GET" and r.path == f"/{video}"]
    err = capsys.readouterr().err
    assert "kept failing (3 attempts): HTTP 503" in err and f"(file {video}, episode " in err
    assert f"finished shards and clips stay in {out}: rerun the same command to resume" in err
    assert len(gets) == 3  # the first attempt and two retries
    # a first compile, yet what it finished stays: whole shards and clips, nothing half-written, no manifest
    assert not (out / MANIFEST_NAME).exists() and temp_files(out) == [] and trusted_files_are_whole(out) == []
    shards_done = len(list((out / ".roboreel-parts").glob("shard-*.json")))
    clips_done = len(list((out / ".roboreel-parts" / "clips").rglob("*.json")))
    assert shards_done >= 1 and clips_done >= 1
    with FaultyServer(small_source) as server:  # the network is back (another port: same source, so it resumes)
        args[1] = server.url
        assert main(args) == 0
    summary = capsys.readouterr().out
    assert f"({4 - shards_done} compiled, {shards_done} already done)" in summary
    assert f"({clips_done} kept from an interrupted run)" in summary and "manifest written" in summary
    assert_same_tree(out, small_compiled, ignore_source=True)


def test_a_video_failing_mid_file_is_reported_as_a_read_error_not_as_bad_data(source_factory):
    """The network goes away after the first episode of a shared mp4 was decoded: FFmpeg sees its reads fail
    (and may report a short or corrupt stream); what is raised is the read error, naming file and episode."""
    cam = "observation.images.top"
    root = source_factory("one_file", episodes=3, min_length=30, max_length=30, height=128, width=128,
                          cameras=(cam,), video_files_size_in_mb=10)  # one mp4 of ~64 KB: FFmpeg reads 32 KB at a time
    with FaultyServer(root) as server:
        # fsspec reads 4 KiB per GET (its default, 5 MB, would fetch the whole file at once)
        src = LeRobotSource(server.url, storage_options={"block_size": 4096}, retry=Retry(1, 0.001))
        spans = [(e.index, e.videos[cam]) for e in src.episodes]
        rel = spans[0][1].path
        assert {s.path for _, s in spans} == {rel} and (root / rel).stat().st_size > 48 << 10
        video = SourceVideo(src, rel, fps=src.fps, episode=0)
        assert len(list(video.frames(spans[0][1].from_timestamp, 30, episode=0))) == 30
        server.set_faults(Faults(unavailable=1.0, path_prefix=f"/{rel}"))
        with pytest.raises(SourceReadError, match=r"kept failing \(2 attempts\): HTTP 503") as err:
            for ep, span in spans[1:]:
                list(video.frames(span.from_timestamp, 30, episode=ep))
        video.close()
    assert err.value.file == rel and err.value.episode in (1, 2)


@pytest.mark.parametrize("prefix", ["meta/info.json", "meta/tasks.parquet", "meta/episodes/", "data/"])
def test_a_source_check_failing_beyond_the_budget_says_nothing_was_written_and_to_rerun(small_source, tmp_path,
                                                                                       capsys, prefix):
    """Reads before OUT is touched (meta/, the data schemas) end with the same rerun hint as later ones."""
    out = tmp_path / "out"
    with FaultyServer(small_source, faults=Faults(unavailable=1.0, path_prefix=f"/{prefix}")) as server:
        assert main(["compile", server.url, str(out), "--workers", "1", "--no-progress", "--retries", "1",
                     "--backoff-s", "0.001"]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"kept failing \(2 attempts\): HTTP 503 .*\(file {re.escape(prefix)}[^)]*\); nothing was "
                     rf"written to {re.escape(str(out))}: rerun the same command to try again$", err.strip()), err
    assert not out.exists()


class _SwallowingFile(RetryingFile):
    """A RetryingFile whose reader gets the end of the file where a read failed for good, as a demuxer that
    swallows a read error sees it: the error stays only in ``failed``. (PyAV 18 re-raises a read callback's
    exception at its next call into FFmpeg, so there FFmpeg never swallows one; other versions and demuxers
    may, which is what SourceVideo's fallback is for.)"""

    def _read_once(self, n: int) -> bytes:
        try:
            return super()._read_once(n)
        except SourceReadError:
            return b""


class _SwallowingSource(LeRobotSource):
    def open(self, rel, mode="rb", *, episode=None, **kwargs):
        fs, path = self.fs, self.path(rel)
        return _SwallowingFile(lambda: fs.open(path, mode, **kwargs), rel=rel, retry=self.retry,
                               error=SourceReadError, episode=episode)


@pytest.mark.parametrize("when", ["opening", "mid-span", "after-seek"])
def test_a_read_error_ffmpeg_swallows_is_reported_not_the_bad_video_it_leaves(source_factory, when):
    """The transfer of a real mp4 is cut short on every request (the server promised the whole file) once the
    network goes bad: before the file is opened, after episode 0 was decoded (episode 1 follows on), or after
    episode 2 was (episode 0 needs a seek back). FFmpeg, seeing the file end, reports an unreadable mp4, a
    broken packet after the frames it had read, or no frames at all; SourceVideo raises the read error instead
    of blaming the data ("cannot open video", "cannot decode video", "video ends after 0 of the episode's 30
    frames"), naming the file and the episode being read."""
    cam = "observation.images.top"
    root = source_factory("one_file", episodes=3, min_length=30, max_length=30, height=128, width=128,
                          cameras=(cam,), video_files_size_in_mb=10)  # one mp4 of ~64 KB: FFmpeg reads 32 KB at a time
    cut = Faults(truncate=1.0, path_prefix="/videos/")
    first, then = {"opening": (None, 1), "mid-span": (0, 1), "after-seek": (2, 0)}[when]
    decoded: list[int] = []
    with FaultyServer(root) as server:
        src = _SwallowingSource(server.url, storage_options={"block_size": 4096}, retry=Retry(1, 0.001))
        spans = {e.index: e.videos[cam] for e in src.episodes}
        rel = spans[0].path
        with pytest.raises(SourceReadError, match=r"kept failing \(2 attempts\)") as err:
            if first is None:
                server.set_faults(cut)
            video = SourceVideo(src, rel, fps=src.fps, episode=then if first is None else first)
            if first is not None:
                assert len(list(video.frames(spans[first].from_timestamp, 30, episode=first))) == 30
                server.set_faults(cut)
                for frame in video.frames(spans[then].from_timestamp, 30, episode=then):
                    decoded.append(frame.pts)
        if first is not None:
            video.close()
        assert server.faults_injected() == {"truncate": 2}  # the first attempt and one retry, then swallowed
    assert (err.value.file, err.value.episode) == (rel, then)
    assert str(err.value).endswith(f"(file {rel}, episode {then})")
    if when == "mid-span":
        assert 0 < len(decoded) < 30  # FFmpeg decoded what it had read before it saw the file end
    else:
        assert decoded == []


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
            compile_dataset(server.url, str(out), settings=TEST, retry=Retry(5, 10.0))  # a retry waits 10 s
        seconds = time.perf_counter() - t0
        gets = [r for r in server.log if r.method == "GET" and r.path == f"/{rel}"]
    assert not isinstance(err.value, SourceReadError) and err.value.file == rel
    assert [r.status for r in gets] == [404]  # fsspec's HEAD, then one GET; no retry
    assert seconds < 10.0 and not out.exists()  # no backoff was waited (room for a slow host)


def test_a_corrupt_video_is_a_data_fault_not_retried(small_source, copy_of, tmp_path):
    """Bad bytes come back the same on every read: no retry, the usual error, and a new OUT is removed."""
    root = copy_of(small_source, "src")
    fault = D.garbage_mid_mp4(root)
    out = tmp_path / "out"
    with FaultyServer(root) as server:
        with pytest.raises(SourceError, match="cannot decode video|video skips frames") as err:
            compile_dataset(server.url, str(out), settings=TEST, retry=Retry(5, 10.0))  # a retry waits 10 s
        gets = [r for r in server.log if r.method == "GET" and r.path == f"/{fault.file}"]
    assert not isinstance(err.value, SourceReadError)
    assert (err.value.file, err.value.episode) == (fault.file, fault.episodes[0])
    assert len(gets) == 1 and not out.exists()
