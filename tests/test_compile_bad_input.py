"""Bad sources: a clear error naming the file and episode, exit status 2, and nothing half-written in OUT."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.settings import FAST

from roboreel.cli import main
from roboreel.compile import compile_dataset
from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource

TEST = FAST
TOP = "observation.images.top"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"


@pytest.fixture()
def broken(small_source, tmp_path) -> Path:
    """A private copy of small_source to break."""
    return Path(shutil.copytree(small_source, tmp_path / "broken"))


def first_user(src: Path, rel: str) -> int:
    """The first episode whose top camera lives in ``rel``."""
    return next(e.index for e in LeRobotSource(str(src)).episodes if e.videos[TOP].path == rel)


def a_shared_video(src: Path) -> str:
    """A top-camera mp4 that starts mid-dataset (its first episode is not episode 0)."""
    paths = [e.videos[TOP].path for e in LeRobotSource(str(src)).episodes]
    return next(p for p in paths if p != paths[0])


def compile_cli(src: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    rc = main(["compile", str(src), str(out), "--preset", "ultrafast", "--episodes-per-shard", "2", "--workers", "1",
               "--no-progress", *extra])
    return rc, capsys.readouterr().err


def assert_nothing_written(out: Path) -> None:
    assert not out.exists() or list(out.iterdir()) == []


def rewrite_parquet(path: Path, fn) -> None:
    table = pq.read_table(path)
    pq.write_table(fn(table), path)


def set_column(table: pa.Table, name: str, row: int, value) -> pa.Table:
    values = table.column(name).to_pylist()
    values[row] = value
    i = table.column_names.index(name)
    return table.set_column(i, name, pa.array(values, table.schema.field(name).type))


# -- videos: missing, corrupt, truncated, short ---------------------------------------------------------
@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated", "empty"])
def test_unreadable_mp4(broken, tmp_path, capsys, damage):
    rel = a_shared_video(broken)
    episode = first_user(broken, rel)
    path = broken / rel
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes({"garbage": os.urandom(len(data)), "truncated": data[: len(data) // 2], "empty": b""}[damage])
    out = tmp_path / "out"
    rc, err = compile_cli(broken, out, capsys)
    assert rc == 2
    assert rel in err and f"episode {episode}" in err
    assert_nothing_written(out)


def test_corrupt_frames_inside_mp4(broken, tmp_path):
    rel = a_shared_video(broken)
    path = broken / rel
    data = bytearray(path.read_bytes())
    third = len(data) // 3
    data[third : third + 2000] = bytes(2000)  # zero a run of compressed frames (mdat), keep the index
    path.write_bytes(bytes(data))
    out = tmp_path / "out"
    with pytest.raises(SourceError, match=rf"{rel}, episode \d+") as info:  # raised in a worker process
        compile_dataset(str(broken), str(out), settings=TEST, workers=2)
    assert info.value.file == rel and info.value.episode is not None
    assert_nothing_written(out)


def test_video_shorter_than_its_span(broken, tmp_path, capsys):
    src = LeRobotSource(str(broken))
    last = src.episodes[-1]
    rel = last.videos[TOP].path
    path = broken / rel
    with av.open(str(path)) as inp:
        packets = [p for p in inp.demux(inp.streams.video[0]) if p.size]
        template = inp.streams.video[0]
        cut = tmp_path / "cut.mp4"
        with av.open(str(cut), "w", format="mp4") as out_c:
            stream = out_c.add_stream_from_template(template, opaque=True)
            for p in packets[:-3]:  # the file now ends 3 frames before the last episode's span does
                p.stream = stream
                out_c.mux(p)
    shutil.move(cut, path)
    out = tmp_path / "out"
    rc, err = compile_cli(broken, out, capsys)
    assert rc == 2
    assert f"video ends after {last.length - 3} of the episode's {last.length} frames" in err
    assert f"{rel}, episode {last.index}" in err
    assert_nothing_written(out)


# -- tables and metadata ------------------------------------------------------------------------------------
def test_missing_parquet_columns(broken, tmp_path, capsys):
    rel = "data/chunk-000/file-001.parquet"
    first = next(e.index for e in LeRobotSource(str(broken)).episodes if e.data_path == rel)
    rewrite_parquet(broken / rel, lambda t: t.drop_columns(["action"]))
    out = tmp_path / "out"
    out.mkdir()  # an empty OUT made by the user stays, empty
    rc, err = compile_cli(broken, out, capsys)
    assert rc == 2
    assert "lacks columns ['action']" in err and f"{rel}, episode {first}" in err
    assert out.is_dir() and list(out.iterdir()) == []


@pytest.mark.parametrize("fault", ["span", "from_index", "length", "total_episodes"])
def test_inconsistent_episodes_metadata(broken, tmp_path, capsys, fault):
    if fault == "span":  # the span no longer holds `length` frames
        rewrite_parquet(broken / EPISODES, lambda t: set_column(t, f"videos/{TOP}/to_timestamp", 2,
                                                                t.column(f"videos/{TOP}/to_timestamp")[2].as_py() + 0.2))
        want = ["episode 2", "holds", "length is"]
    elif fault == "from_index":  # episode 3 overlaps episode 2
        def shift(t: pa.Table) -> pa.Table:
            t = set_column(t, "dataset_from_index", 3, t.column("dataset_from_index")[3].as_py() - 1)
            return set_column(t, "dataset_to_index", 3, t.column("dataset_to_index")[3].as_py() - 1)
        rewrite_parquet(broken / EPISODES, shift)
        want = ["episode 3", "inconsistent", "dataset_from_index"]
    elif fault == "length":
        rewrite_parquet(broken / EPISODES, lambda t: set_column(t, "length", 5, t.column("length")[5].as_py() + 1))
        want = ["episode 5", "disagree with length"]
    else:
        info = json.loads((broken / "meta/info.json").read_text())
        info["total_episodes"] = 9
        (broken / "meta/info.json").write_text(json.dumps(info))
        want = ["total_episodes=9", "meta/info.json"]
    out = tmp_path / "out"
    rc, err = compile_cli(broken, out, capsys)
    assert rc == 2
    assert all(w in err for w in want), err
    assert_nothing_written(out)


@pytest.mark.parametrize("version", ["v2.1", "v2.0"])
def test_unsupported_codebase_version(broken, tmp_path, capsys, version):
    """A LeRobot v2.x source: one error naming LeRobot's own converter (v2.0 needs the v2.1 step first)."""
    info = json.loads((broken / "meta/info.json").read_text())
    info["codebase_version"] = version
    (broken / "meta/info.json").write_text(json.dumps(info))
    out = tmp_path / "out"
    rc, err = compile_cli(broken, out, capsys)
    assert rc == 2 and f"codebase_version '{version}'" in err and "meta/info.json" in err
    assert "python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=" in err
    assert ("bring this v2.0 dataset to v2.1" in err) == (version == "v2.0")
    assert_nothing_written(out)


def test_part_job_failure_keeps_finished_shards_and_resumes(broken, small_compiled, tmp_path):
    """In a --part job a data fault leaves only complete shards (no temps, no manifest); fix, rerun, done."""
    src = LeRobotSource(str(broken))
    last = src.episodes[-1]
    path = broken / last.videos[TOP].path
    good = path.read_bytes()
    path.write_bytes(os.urandom(len(good)))  # same size: same source fingerprint once repaired
    out = tmp_path / "out"
    with pytest.raises(SourceError, match=f"episode {first_user(broken, last.videos[TOP].path)}"):
        compile_dataset(str(broken), str(out), settings=TEST, part=(1, 2))
    assert list(out.rglob("*.tmp")) == [] and not (out / "roboreel.json").exists()
    assert not (out / "shards/shard-000003.tar").exists()
    path.write_bytes(good)
    report = compile_dataset(str(broken), str(out), settings=TEST, part=(1, 2))
    assert report.shards_compiled + report.shards_skipped == 2
    report = compile_dataset(str(broken), str(out), settings=TEST, part=(0, 2))
    assert report.finalized
    for rel in ("roboreel.json", "meta/info.json", *(f"shards/shard-{i:06d}.tar" for i in range(4))):
        if rel == "roboreel.json":  # the manifest names the source's URL, which differs here
            a = json.loads((out / rel).read_text())
            b = json.loads((small_compiled / rel).read_text())
            a["source"]["url"] = b["source"]["url"]
            assert a == b
        else:
            assert (out / rel).read_bytes() == (small_compiled / rel).read_bytes()


def _all_data(src: Path, fn) -> None:
    """``fn`` applied to every data file, rewritten with one row group per episode, as LeRobot writes it."""
    for path in sorted(src.glob("data/**/*.parquet")):
        table = fn(pq.read_table(path))
        eps = table.column("episode_index").to_numpy()
        with pq.ParquetWriter(path, table.schema) as w:
            for ep in dict.fromkeys(eps.tolist()):
                w.write_table(table.filter(pa.array(eps == ep)))


def _refused_by_both(broken: Path, tmp_path: Path, capsys, ep, message: str) -> dict:
    """compile exits 2 with ``message`` naming the episode's file and the episode, writing nothing; validate
    --fast exits 1 with one finding, returned for the caller to check."""
    out = tmp_path / "out"
    rc, err = compile_cli(broken, out, capsys)
    assert rc == 2 and message in err and f"{ep.data_path}, episode {ep.index}" in err, err
    assert_nothing_written(out)
    assert main(["validate", str(broken), "--fast", "--json"]) == 1
    [f] = json.loads(capsys.readouterr().out)["findings"]
    return f


def _as(t: pa.Table, name: str, typ: pa.DataType) -> pa.Table:
    return t.set_column(t.column_names.index(name), name, t.column(name).cast(typ, safe=False))


@pytest.mark.parametrize("fault", ["int-declared-float", "shape", "undeclared-column"])
def test_data_columns_not_what_info_json_declares(broken, tmp_path, capsys, fault):
    """LeRobot casts each column to the feature info.json declares: another shape or an undeclared column fails
    its load, integers declared float32 come back float32. Refused, not carried in their stored type."""
    info = json.loads((broken / "meta/info.json").read_text())
    if fault == "int-declared-float":
        _all_data(broken, lambda t: _as(t, "action", pa.list_(pa.int64(), 6)))
        want, code = "column 'action' holds integer values", "data-column-type"
    elif fault == "shape":
        info["features"]["observation.state"]["shape"] = [7]
        (broken / "meta/info.json").write_text(json.dumps(info))
        want, code = "info.json declares float32 of shape [7]: LeRobot cannot load it", "data-column-type"
    else:
        _all_data(broken, lambda t: t.append_column("extra", pa.array([0.5] * t.num_rows, pa.float32())))
        want, code = "has columns ['extra'] that info.json does not declare", "data-columns-undeclared"
    rel = LeRobotSource(str(broken)).episodes[0].data_path
    out = tmp_path / "out"
    rc, err = compile_cli(broken, out, capsys)
    assert rc == 2 and want in err and f"{rel}, episode 0" in err, err
    assert_nothing_written(out)
    assert main(["validate", str(broken), "--fast", "--json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {f["code"] for f in findings} == {code} and findings[0]["file"] == rel


def test_float64_column_declared_float32_still_compiles(broken, tmp_path, capsys):
    """Within one kind of number the reader returns LeRobot's dtype already: not refused."""
    _all_data(broken, lambda t: _as(t, "action", pa.list_(pa.float64(), 6)))
    assert main(["validate", str(broken), "--fast"]) == 0
    rc, err = compile_cli(broken, tmp_path / "out", capsys)
    assert rc == 0, err


def test_task_index_not_in_tasks(broken, tmp_path, capsys):
    src = LeRobotSource(str(broken))
    ep = src.episodes[3]
    _all_data(broken, lambda t: set_column(t, "task_index", int(
        t.column("episode_index").to_numpy().tolist().index(ep.index)), 99) if ep.index in
        t.column("episode_index").to_pylist() else t)
    f = _refused_by_both(broken, tmp_path, capsys, ep, "task_index [99] not in meta/tasks.parquet")
    assert (f["code"], f["file"], f["episodes"]) == ("task-index-unknown", ep.data_path, [ep.index])


@pytest.mark.parametrize("stats", ["{not json", "[1, 2]"])
def test_unreadable_stats_json(broken, tmp_path, capsys, stats):
    (broken / "meta/stats.json").write_text(stats)
    assert main(["validate", str(broken), "--fast", "--json"]) == 1
    [f] = json.loads(capsys.readouterr().out)["findings"]
    assert (f["code"], f["file"]) == ("stats-unreadable", "meta/stats.json")


def test_chunks_size_not_positive(broken, tmp_path, capsys):
    info = json.loads((broken / "meta/info.json").read_text())
    info["chunks_size"] = 0
    (broken / "meta/info.json").write_text(json.dumps(info))
    out = tmp_path / "out"
    rc, err = compile_cli(broken, out, capsys)
    assert rc == 2 and "chunks_size must be a positive number, got 0" in err and "meta/info.json" in err
    assert_nothing_written(out)
    assert main(["validate", str(broken)]) == 2


def test_nan_timestamp(broken, tmp_path, capsys):
    """A NaN timestamp compared as 'not over the tolerance' and passed (LeRobot fails on it)."""
    src = LeRobotSource(str(broken))
    ep = src.episodes[2]
    row = None

    def nan_at(t: pa.Table) -> pa.Table:
        nonlocal row
        eps = t.column("episode_index").to_pylist()
        if ep.index not in eps:
            return t
        row = eps.index(ep.index) + 3
        return set_column(t, "timestamp", row, float("nan"))

    _all_data(broken, nan_at)
    f = _refused_by_both(broken, tmp_path, capsys, ep, "frame_index 3 has timestamp nan")
    assert (f["code"], f["file"], f["episode"]) == ("timestamp-mismatch", ep.data_path, ep.index)


@pytest.mark.parametrize("where", ["row", "element"])
def test_null_in_a_numeric_feature(broken, tmp_path, capsys, where):
    """A null state row (or one null element of it): LeRobot returns None there, and roboreel returned that
    episode's whole column as Python lists instead of tensors. Refused by compile and by validate."""
    src = LeRobotSource(str(broken))
    ep = src.episodes[1]

    def null_at(t: pa.Table) -> pa.Table:
        eps = t.column("episode_index").to_pylist()
        if ep.index not in eps:
            return t
        row = eps.index(ep.index) + 4
        value = None if where == "row" else [None, *t.column("observation.state")[row].as_py()[1:]]
        return set_column(t, "observation.state", row, value)

    _all_data(broken, null_at)
    f = _refused_by_both(broken, tmp_path, capsys, ep, "column 'observation.state' is null or holds a null at "
                         "frame_index 4")
    assert (f["code"], f["file"], f["episodes"]) == ("data-null", ep.data_path, [ep.index])
