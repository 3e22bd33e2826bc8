"""Parallel compile: one (episode, camera) encode per task, within and across shards, byte-identical output for
any worker count; clips finished by a failed run are reused; the default shard-count rule; the decode thread."""

from __future__ import annotations

import math
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from reliability import damage as D  # tests/ is on sys.path (rootdir conftest)
from reliability.trees import assert_same_tree, temp_files

from roboreel.compile import CompileSettings, compile_dataset
from roboreel.compile.plan import plan_shards
from roboreel.compile.source import read_ahead
from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.validate import validate

ONE_SHARD = CompileSettings(preset="ultrafast", episodes_per_shard=1000)


@pytest.fixture()
def copy_of(tmp_path):
    def make(root: Path, name: str) -> Path:
        return Path(shutil.copytree(root, tmp_path / name))

    return make


@pytest.fixture(scope="module")
def rolled_source(small_source) -> Path:
    """8 episodes, 2 cameras, each camera's video rolled over several mp4s (episodes start mid-file): conftest's
    session-wide small source (read only here)."""
    return small_source


@pytest.fixture(scope="module")
def one_worker(rolled_source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("par-1") / "out"
    report = compile_dataset(str(rolled_source), str(out), settings=ONE_SHARD, workers=1)
    assert (report.shards, report.clips_encoded, report.finalized) == (1, 16, True)
    return out


def test_source_rolls_over(rolled_source):
    src = LeRobotSource(str(rolled_source))
    for cam in src.camera_keys:
        assert len({e.videos[cam].path for e in src.episodes}) >= 3
        assert any(e.videos[cam].from_timestamp > 0 for e in src.episodes)


@pytest.mark.parametrize("workers", [2, 3])
def test_one_shard_any_worker_count_same_bytes(rolled_source, one_worker, tmp_path, workers):
    """A one-shard dataset is encoded by several processes (clips of one shard in parallel), same bytes."""
    out = tmp_path / "out"
    report = compile_dataset(str(rolled_source), str(out), settings=ONE_SHARD, workers=workers)
    assert (report.shards, report.clips_encoded, report.finalized) == (1, 16, True)
    assert_same_tree(out, one_worker)
    assert not (out / ".roboreel-parts" / "clips").exists()  # clips are gone once packed


def test_default_plan_any_worker_count_same_bytes(rolled_source, tmp_path):
    """Default planning (several shards), across and within shards: 1, 2 and 3 workers give the same bytes."""
    settings = CompileSettings(preset="ultrafast")
    outs = []
    for workers in (1, 2, 3):
        outs.append(tmp_path / f"w{workers}")
        report = compile_dataset(str(rolled_source), str(outs[-1]), settings=settings, workers=workers)
        assert report.shards == 8 and report.finalized  # 8 episodes: a multiple of 8 shards, one episode each
    assert_same_tree(outs[1], outs[0])
    assert_same_tree(outs[2], outs[0])
    assert validate(str(outs[0])).exit_code == 0


def test_clips_of_a_failed_run_are_reused_unless_their_source_changed(rolled_source, one_worker, copy_of,
                                                                       tmp_path):
    """A --part run fails on a corrupt episode: the clips it finished stay; after the fix, the rerun reuses the
    ones made from unchanged files and remakes those of the repaired file; the result equals a clean compile."""
    root = copy_of(rolled_source, "src")
    src = LeRobotSource(str(root))
    video = src.episodes[-1].videos[D.TOP].path  # a later file: some clips come before the fault
    pristine = (root / video).read_bytes()
    fault = D.garbage_mid_mp4(root, video=video)
    (bad,) = fault.episodes
    out = tmp_path / "out"
    with pytest.raises(SourceError) as err:
        compile_dataset(str(root), str(out), settings=ONE_SHARD, workers=1, part=(0, 1))
    assert (err.value.file, err.value.episode) == (video, bad)
    made = sorted((out / ".roboreel-parts" / "clips").rglob("*.json"))
    cams = src.camera_keys
    before = [(e.index, c) for e in src.episodes for c in cams][: [e.index for e in src.episodes].index(bad) * 2]
    assert [p.name for p in made] == [f"{e:06d}.{c}.json" for e, c in before]
    assert temp_files(out) == [] and not (out / "shards" / "shard-000000.tar").exists()
    (root / video).write_bytes(pristine)
    again = compile_dataset(str(root), str(out), settings=ONE_SHARD, workers=2)
    stale = [(e, c) for e, c in before if c == D.TOP and src.episode(e).videos[c].path == video]
    assert again.clips_reused == len(before) - len(stale) and again.finalized
    assert "kept from an interrupted run" in again.summary()
    assert_same_tree(out, one_worker, ignore_source=True)


def test_a_worker_failure_names_the_earliest_bad_episode(rolled_source, copy_of, tmp_path):
    """Two corrupt episodes in different files: every worker count names the one that comes first."""
    root = copy_of(rolled_source, "src")
    src = LeRobotSource(str(root))
    files = list(dict.fromkeys(e.videos[D.TOP].path for e in src.episodes))
    late = D.garbage_mid_mp4(root, video=files[-1])
    early = D.garbage_mid_mp4(root, video=files[0])
    assert early.episodes[0] < late.episodes[0]
    for workers in (1, 3):
        with pytest.raises(SourceError) as err:
            compile_dataset(str(root), str(tmp_path / f"w{workers}"), settings=ONE_SHARD, workers=workers)
        assert (err.value.file, err.value.episode) == (files[0], early.episodes[0])
        assert not (tmp_path / f"w{workers}").exists()


# -- the default shard count ------------------------------------------------------------------------------
def _plan(sizes: list[float], **settings) -> list[list[int]]:
    eps = [SimpleNamespace(index=i) for i in range(len(sizes))]
    return plan_shards(eps, dict(enumerate(sizes)), CompileSettings(**settings))  # type: ignore[arg-type]


@pytest.mark.parametrize(("episodes", "mb_each", "want"), [
    (1, 1.0, 1), (3, 1.0, 2), (7, 1.0, 4), (8, 1.0, 8), (20, 1.0, 8), (30, 1.0, 24), (1000, 1.0, 24),
    (1000, 3.0, 24), (1000, 10.0, 96), (50, 200.0, 50),
])
def test_default_shard_count(episodes, mb_each, want):
    shards = _plan([mb_each * 1e6] * episodes)
    assert len(shards) == want
    assert [e for s in shards for e in s] == list(range(episodes))  # consecutive, every episode once
    assert all(s for s in shards)
    assert all(len(s) == 1 or len(s) * mb_each <= 128 for s in shards)  # bounded unless one episode is larger


def test_shard_count_divides_common_consumer_counts():
    """Enough episodes: the count is a multiple of 24, so 1, 2, 3, 4, 6 and 8 consumers read whole shards."""
    for episodes in (24, 25, 99, 500):
        n = len(_plan([2e6] * episodes))
        assert n % 24 == 0 and all(n % c == 0 for c in (1, 2, 3, 4, 6, 8))


def test_uneven_episodes_are_balanced_by_bytes_and_bounded():
    sizes = [(1 + (i * 7) % 13) * 1e6 for i in range(300)]
    shards = _plan(sizes, shard_size_mb=64.0)
    total = [sum(sizes[e] for e in s) for s in shards]
    assert len(shards) % 24 == 0 and len(shards) >= math.ceil(sum(sizes) / 64e6)
    assert max(total) <= 64e6 and max(total) - min(total) <= 2 * max(sizes)


def test_overrides_keep_working():
    assert [len(s) for s in _plan([1e6] * 10, episodes_per_shard=4)] == [4, 4, 2]
    assert len(_plan([1e6] * 100, shard_size_mb=10.0)) == 24  # ceil(100 / 10) = 10 -> 24
    assert len(_plan([1e6] * 100, shard_size_mb=2.0)) == 72  # ceil(100 / 2) = 50 -> 72


# -- decode ahead on a thread -------------------------------------------------------------------------------
def test_read_ahead_keeps_order_and_raises_the_producers_error():
    def items():
        yield from range(10)
        raise SourceError("broken", file="videos/x.mp4", episode=3)

    got = []
    with pytest.raises(SourceError) as err:
        for x in read_ahead(items(), depth=2):
            got.append(x)
    assert got == list(range(10)) and (err.value.file, err.value.episode) == ("videos/x.mp4", 3)


def test_read_ahead_stops_and_joins_its_thread_when_the_consumer_stops():
    produced = []

    def items():
        for i in range(1000):
            produced.append(i)
            yield i

    before = threading.active_count()
    gen = read_ahead(items(), depth=2)
    assert [next(gen) for _ in range(3)] == [0, 1, 2]
    gen.close()
    assert threading.active_count() == before and len(produced) <= 3 + 2 + 1
