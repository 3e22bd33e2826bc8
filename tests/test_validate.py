"""roboreel validate of sources: clean datasets pass; each kind of damage, built here on real bytes, is reported
with its place; exit codes 0 / 1 / 2 through the CLI and its JSON. Compiled outputs: test_validate_compiled.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from support.validating import copy, drop_last_frames, errors, run_json

from roboreel.cli import main
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.validate import validate


# -- sources -------------------------------------------------------------------------------------------------
def test_clean_source(small_source, capsys):
    rc, doc = run_json(capsys, str(small_source))
    assert rc == 0 and doc["verdict"] == "clean" and doc["kind"] == "source" and doc["findings"] == []
    mp4s = list(small_source.glob("videos/**/*.mp4"))
    assert doc["checked"]["episodes"] == 8 and doc["checked"]["row_groups"] == 8
    assert doc["checked"]["videos"] == len(mp4s)
    assert main(["validate", str(small_source), "--fast"]) == 0 and main(["validate", str(small_source), "--deep"]) == 0
    text = capsys.readouterr().out
    assert "CLEAN" in text and "0 errors" in text


def test_several_episodes_in_one_row_group(source_factory, capsys):
    root = source_factory(row_groups="file")
    expected = []
    for path in sorted(root.glob("data/**/*.parquet")):
        eps = pq.read_table(path, columns=["episode_index"]).column(0).to_pylist()
        assert pq.ParquetFile(path).metadata.num_row_groups == 1
        if len(set(eps)) > 1:
            expected.append((str(path.relative_to(root)), 0, sorted(set(eps))))
    assert expected, "the fixture must put several episodes in a row group"
    # a layout LeRobot reads (and 0.6.1's own dataset edits write), and compile accepts: a warning, exit 0;
    # --strict (the pre-commit hooks) fails on it
    rc, doc = run_json(capsys, str(root))
    assert rc == 0 and errors(doc) == []
    got = [(f["file"], f["row_group"], f["episodes"]) for f in doc["findings"]]
    assert {(f["severity"], f["code"]) for f in doc["findings"]} == {("warning", "rowgroup-multi-episode")}
    assert sorted(got) == sorted(expected)
    assert main(["validate", str(root), "--strict"]) == 1


def test_episode_split_across_row_groups(small_source, tmp_path):
    root = copy(small_source, tmp_path)
    src = LeRobotSource(str(root))
    ep = src.episodes[0]
    path = root / ep.data_path
    table = pq.read_table(path)
    eps = table.column("episode_index").to_numpy()
    with pq.ParquetWriter(path, table.schema) as w:  # episode 0 as two row groups, the others as one each
        first = table.filter(pa.array(eps == ep.index))
        w.write_table(first.slice(0, 5))
        w.write_table(first.slice(5))
        for other in dict.fromkeys(eps.tolist()):
            if other != ep.index:
                w.write_table(table.filter(pa.array(eps == other)))
    report = validate(str(root))
    assert report.exit_code == 0  # a layout LeRobot reads and compile accepts: a warning
    [f] = report.findings
    assert (f.severity, f.code, f.file, f.episode) == ("warning", "episode-split-rowgroups", ep.data_path, ep.index)
    assert f.message == "rows spread over 2 row groups: 0, 1"


def _rewrite_episodes_meta(root: Path, change) -> None:
    [path] = list(root.glob("meta/episodes/**/*.parquet"))
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        change(r)
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_episodes_meta_disagrees_with_data(small_source, tmp_path):
    root = copy(small_source, tmp_path)

    def change(r):
        if r["episode_index"] == 3:  # a consistent range that is not where the rows are
            r["dataset_from_index"] += 5
            r["dataset_to_index"] += 5
        if r["episode_index"] == 5:  # from/to disagree with length
            r["dataset_to_index"] += 1

    _rewrite_episodes_meta(root, change)
    report = validate(str(root))
    assert report.exit_code == 1
    by_ep = {(f.code, f.episode) for f in report.findings}
    assert ("episode-index-mismatch", 3) in by_ep and ("episode-meta-range", 5) in by_ep
    assert ("episode-index-gap", 3) in by_ep and ("episode-index-gap", 4) in by_ep
    assert {f.episode for f in report.findings if f.severity == "error"} == {3, 5}


def test_data_file_copied_under_another_name(small_source, tmp_path):
    """The same rows in two data files (LeRobot loads every data/*/*.parquet): reported, not a crash on the
    two equal worst timestamps."""
    root = copy(small_source, tmp_path)
    src = LeRobotSource(str(root))
    rel = src.episodes[0].data_path
    shutil.copy(root / rel, root / "data/chunk-000/file-009.parquet")
    report = validate(str(root))
    assert report.exit_code == 1
    hosted = {e.index for e in src.episodes if e.data_path == rel}
    assert {f.episode for f in report.findings if f.code == "episode-wrong-file"} == hosted
    assert {f.code for f in report.findings} <= {"episode-wrong-file", "episode-length-mismatch",
                                                  "episode-index-mismatch", "episode-split-rowgroups"}


def test_missing_video_and_data_file(small_source, tmp_path):
    root = copy(small_source, tmp_path)
    src = LeRobotSource(str(root))
    video = src.episodes[-1].videos[src.camera_keys[1]].path
    data = src.episodes[0].data_path
    (root / video).unlink()
    (root / data).unlink()
    report = validate(str(root))
    assert report.exit_code == 1
    found = {(f.code, f.file, f.episodes) for f in report.findings}
    hosts_video = tuple(e.index for e in src.episodes if e.videos[src.camera_keys[1]].path == video)
    hosts_data = tuple(e.index for e in src.episodes if e.data_path == data)
    assert found == {("video-missing", video, hosts_video), ("data-file-missing", data, hosts_data)}


def test_video_shorter_than_its_spans_and_truncated_mp4(small_source, tmp_path):
    root = copy(small_source, tmp_path)
    src = LeRobotSource(str(root))
    top, wrist = src.camera_keys
    short = src.episodes[0].videos[top].path
    drop_last_frames(root / short, 3)
    last = [e for e in src.episodes if e.videos[top].path == short][-1]
    cut = src.episodes[-1].videos[wrist].path
    data = (root / cut).read_bytes()
    (root / cut).write_bytes(data[: len(data) // 2])
    for args in ([], ["--fast"]):
        report = validate(str(root), fast=bool(args))
        assert report.exit_code == 1
        [too_short] = [f for f in report.findings if f.code == "video-too-short"]
        assert (too_short.file, too_short.episode) == (short, last.index)
        assert f"mp4 has {last.videos[top].to_timestamp * src.fps - 3:.0f} frames" in too_short.message
        [broken] = [f for f in report.findings if f.code == "video-unreadable"]
        assert broken.file == cut and broken.episodes == tuple(e.index for e in src.episodes
                                                              if e.videos[wrist].path == cut)
        assert {f.code for f in report.findings} == {"video-too-short", "video-unreadable"}


def test_unreadable_inputs_exit_2(small_source, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    cases = {"path-missing": tmp_path / "nope", "not-a-dataset": tmp_path / "empty"}
    for name, text in {"info-unreadable": "{not json", "version-unsupported": '{"codebase_version": "v2.1"}'}.items():
        (tmp_path / name / "meta").mkdir(parents=True)
        (tmp_path / name / "meta" / "info.json").write_text(text)
        cases[name] = tmp_path / name
    (tmp_path / "half" / "shards").mkdir(parents=True)
    cases["manifest-missing"] = tmp_path / "half"
    for code, path in cases.items():
        rc, doc = run_json(capsys, str(path))
        assert (rc, doc["verdict"], [f["code"] for f in doc["findings"]]) == (2, "unreadable", [code])
        if code == "version-unsupported":  # names LeRobot's own converter
            assert "python -m lerobot.scripts.convert_dataset_v21_to_v30" in doc["findings"][0]["message"]


def test_camera_size_in_info_json_disagreeing_with_the_mp4s(small_source, tmp_path):
    """info.json's feature shape (what a policy is built for) and its video.height/width each checked against the
    mp4s: a warning per mp4 naming both sizes, exit 0 (LeRobot reads the frames as decoded, and compile declares
    their real size)."""
    root = copy(small_source, tmp_path)
    src = LeRobotSource(str(root))
    info = json.loads((root / "meta/info.json").read_text())
    sizes = {cam: tuple(info["features"][cam]["shape"]) for cam in src.camera_keys}
    top, wrist = src.camera_keys
    h, w, c = sizes[top]
    info["features"][top]["shape"] = [h, w + 16, c]
    info["features"][wrist]["info"]["video.height"] += 16
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    report = validate(str(root))
    assert report.exit_code == 0 and all(f.severity == "warning" for f in report.findings)
    got = {(f.code, f.file, f.message.split(":")[0]) for f in report.findings}
    want = {("video-codec-mismatch", p, f"frames are {h}x{w}, the feature's shape {[h, w + 16, c]} says {h}x{w + 16}")
            for p in {e.videos[top].path for e in src.episodes}}
    wh, ww, _ = sizes[wrist]
    want |= {("video-codec-mismatch", p, f"size {wh}x{ww}, info.json says {wh + 16}x{ww}")
             for p in {e.videos[wrist].path for e in src.episodes}}
    assert got == want
