"""roboreel validate: clean datasets pass; each kind of damage, built here on real bytes, is reported with its
place; exit codes 0 / 1 / 2 through the CLI and its JSON."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from handmade import edit_index, hand_compile, rewrite_shard

from roboreel.cli import main
from roboreel.formats import shard as sh
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import load_manifest
from roboreel.validate import validate


def run_json(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["validate", *args, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def errors(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["severity"] == "error"]


@pytest.fixture(scope="module")
def hand_compiled(tmp_path_factory, small_source) -> Path:
    """small_source compiled by hand (tests/handmade.py) into 3 shards of 3, 3, 2 episodes (read-only)."""
    out = tmp_path_factory.mktemp("hand") / "compiled"
    hand_compile(small_source, out, per_shard=3)
    return out


def copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


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


def _drop_last_frames(path: Path, n: int) -> None:
    """Remux ``path`` without its last ``n`` packets: a valid mp4 with fewer frames."""
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(path)) as i, av.open(str(tmp), "w", format="mp4") as o:
        ist = i.streams.video[0]
        ost = o.add_stream_from_template(ist, opaque=True)
        packets = [p for p in i.demux(ist) if p.size]
        for p in packets[:-n]:
            p.stream = ost
            o.mux(p)
    tmp.replace(path)


def test_video_shorter_than_its_spans_and_truncated_mp4(small_source, tmp_path):
    root = copy(small_source, tmp_path)
    src = LeRobotSource(str(root))
    top, wrist = src.camera_keys
    short = src.episodes[0].videos[top].path
    _drop_last_frames(root / short, 3)
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


# -- compiled ------------------------------------------------------------------------------------------------
def test_hand_compiled_is_clean(hand_compiled, capsys):
    rc, doc = run_json(capsys, str(hand_compiled))
    assert rc == 0 and doc["kind"] == "compiled" and doc["findings"] == []
    assert doc["checked"]["shards"] == 3 and doc["checked"]["records"] == 8 and doc["checked"]["clips"] == 16
    assert doc["checked"]["row_groups"] == 8  # data/ passed the v3 checks too
    assert validate(str(hand_compiled), deep=True).findings == []


def test_truncated_shard(hand_compiled, tmp_path):
    root = copy(hand_compiled, tmp_path)
    m = load_manifest(str(root))
    path = root / m.shards[1].path
    data = path.read_bytes()
    with tarfile.open(path) as tf:  # the second record's members (header offsets, data offsets)
        second = [x for x in tf.getmembers() if x.name.startswith(sh.episode_key(m.shards[1].episodes[1]))]
    # cut inside the second record's clip data, then exactly at the record's start (no end-of-archive marker)
    for cut in (second[1].offset_data + 100, second[0].offset):
        path.write_bytes(data[:cut])
        report = validate(str(root))
        assert report.exit_code == 1
        codes = {(f.code, f.file) for f in report.findings}
        assert codes == {(c, m.shards[1].path) for c in ("shard-size-mismatch", "shard-truncated", "record-missing")}
        [missing] = [f for f in report.findings if f.code == "record-missing"]
        assert list(missing.episodes) == m.shards[1].episodes[1:]


def test_member_missing_and_unexpected(hand_compiled, tmp_path):
    root = copy(hand_compiled, tmp_path)
    m = load_manifest(str(root))
    ep = m.shards[0].episodes[1]
    clip = sh.clip_member(ep, m.cameras[0].key)

    def edit(members):
        members.pop(clip)
        return dict(sorted({**members, f"{sh.episode_key(ep)}.txt": b"hello"}.items()))

    rewrite_shard(root, 0, edit)
    report = validate(str(root))
    assert report.exit_code == 1
    assert {(f.severity, f.code, f.file, f.episode) for f in report.findings} == {
        ("error", "member-missing", m.shards[0].path, ep), ("warning", "member-unexpected", m.shards[0].path, ep)}


def test_record_members_not_adjacent(hand_compiled, tmp_path):
    root = copy(hand_compiled, tmp_path)
    m = load_manifest(str(root))
    ep = m.shards[1].episodes[0]
    moved = sh.rows_member(ep)

    def edit(members):  # the first record's parquet moved to the end of the tar
        return {**{n: b for n, b in members.items() if n != moved}, moved: members[moved]}

    rewrite_shard(root, 1, edit)
    report = validate(str(root))
    assert {(f.code, f.episode) for f in report.findings} == {("record-duplicate", ep), ("member-missing", ep)}


def test_record_json_and_rows_against_manifest(hand_compiled, tmp_path):
    root = copy(hand_compiled, tmp_path)
    m = load_manifest(str(root))
    a, b = m.shards[0].episodes[:2]

    def edit(members):
        meta = json.loads(members[sh.json_member(a)])
        members[sh.json_member(a)] = json.dumps({**meta, "length": meta["length"] + 1}).encode()
        rows = sh.parquet_bytes_to_table(members[sh.rows_member(b)])
        buf = pa.BufferOutputStream()
        pq.write_table(rows, buf, row_group_size=5)  # same values, several row groups
        members[sh.rows_member(b)] = buf.getvalue().to_pybytes()
        return members

    rewrite_shard(root, 0, edit)
    report = validate(str(root))
    # rows_sha256 hashes values, not parquet bytes: only the row-group layout is wrong for b
    assert {(f.code, f.episode) for f in report.findings} == {("record-meta-mismatch", a), ("rows-rowgroups", b)}


def test_clip_shorter_than_episode(hand_compiled, tmp_path):
    root = copy(hand_compiled, tmp_path)
    m = load_manifest(str(root))
    ep = m.shards[2].episodes[0]
    clip = sh.clip_member(ep, m.cameras[1].key)

    def edit(members):
        tmp = tmp_path / "clip.mp4"
        tmp.write_bytes(members[clip])
        _drop_last_frames(tmp, 2)
        return {**members, clip: tmp.read_bytes()}

    rewrite_shard(root, 2, edit)
    report = validate(str(root))
    [f] = report.findings
    assert (f.code, f.file, f.episode) == ("clip-frame-count", m.shards[2].path, ep)
    assert f"has {m.episode(ep).length - 2} frames" in f.message


def test_manifest_checksums(hand_compiled, tmp_path):
    root = copy(hand_compiled, tmp_path)
    shards = load_manifest(str(root)).shards
    edit_index(root, "shards", lambda rows: rows[2].update(sha256="0" * 64))

    def episodes(rows):
        rows[0]["members"][0]["sha256"] = "0" * 64
        rows[1]["rows_sha256"] = "v2:" + "0" * 64

    edit_index(root, "episodes", episodes)
    report = validate(str(root))
    assert {(f.code, f.file, f.episode) for f in report.findings} == {
        ("shard-checksum-mismatch", shards[2].path, None),
        ("member-checksum-mismatch", shards[0].path, 0),
        ("rows-digest", shards[0].path, 1),
        ("rows-digest", LeRobotSource(str(root)).episode(1).data_path, 1)}  # data/ is hashed against it too
    assert validate(str(root), fast=True).findings == []  # --fast does not hash


def test_manifest_contradicting_itself(hand_compiled, tmp_path):
    root = copy(hand_compiled, tmp_path)

    def episodes(rows):
        rows[0]["shard"] = 2
        rows[4]["to_index"] += 1

    edit_index(root, "episodes", episodes)
    report = validate(str(root))
    assert {(f.code, f.episode) for f in report.findings} == {
        ("manifest-inconsistent", 0), ("manifest-inconsistent", 4),
        ("record-meta-mismatch", 4), ("meta-manifest-mismatch", 4)}  # the json and meta/ disagree with it too


def test_manifest_version_and_garbage_exit_2(hand_compiled, tmp_path, capsys):
    root = copy(hand_compiled, tmp_path)
    doc = json.loads((root / "roboreel.json").read_text())
    (root / "roboreel.json").write_text(json.dumps({**doc, "format_version": 99}))
    rc, out = run_json(capsys, str(root))
    assert rc == 2 and [f["code"] for f in out["findings"]] == ["manifest-version"]
    assert "newer" in out["findings"][0]["message"]
    (root / "roboreel.json").write_text(json.dumps({**doc, "index": "x"}))
    rc, out = run_json(capsys, str(root))
    assert rc == 2 and [f["code"] for f in out["findings"]] == ["manifest-unreadable"]


def test_shard_count_over_world_size_and_workers(hand_compiled, capsys):
    path = str(hand_compiled)  # 3 shards
    rc, doc = run_json(capsys, path, "--world-size", "2", "--num-workers", "2")
    assert rc == 0 and [(f["severity"], f["code"]) for f in doc["findings"]] == [("warning", "shards-uneven")]
    assert main(["validate", path, "--world-size", "2", "--strict"]) == 1
    assert main(["validate", path, "--world-size", "3", "--strict"]) == 0


def test_compiled_data_is_checked_as_v3(hand_compiled, tmp_path):
    root = copy(hand_compiled, tmp_path)
    path = sorted(root.glob("data/**/*.parquet"))[0]
    table = pq.read_table(path)
    pq.write_table(table, path, row_group_size=table.num_rows)  # the whole file as one row group
    eps = sorted(set(table.column("episode_index").to_pylist()))
    report = validate(str(root))
    [f] = report.findings
    assert (f.code, f.file, f.row_group, list(f.episodes)) == (
        "rowgroup-multi-episode", str(path.relative_to(root)), 0, eps)


def test_real_compile_validates_clean(small_compiled, tmp_path):
    compiled = small_compiled
    report = validate(str(compiled))
    assert report.exit_code == 0, report.to_text()
    assert not [f for f in report.findings if f.severity != "warning"]
    m = load_manifest(str(compiled))
    assert report.checked["records"] == len(m.episodes)
    root = copy(compiled, tmp_path)
    shard = root / m.shards[0].path
    shard.write_bytes(shard.read_bytes()[: int(np.ceil(m.shards[0].size * 0.6))])
    broken = validate(str(root))
    assert broken.exit_code == 1 and "shard-truncated" in broken.codes()


def test_old_v1_rows_digest_is_checked_and_a_mismatch_only_warns(hand_compiled, tmp_path):
    """Manifests written before digest v2 hold v1 (Arrow IPC) digests: a match still verifies, and a mismatch
    (which v1 also gives for schema metadata alone) is a warning, not a false corruption error."""
    from roboreel.formats.digest import rows_digest_v1

    root = copy(hand_compiled, tmp_path)
    src = LeRobotSource(str(root))

    def episodes(rows):
        rows[0]["rows_sha256"] = rows_digest_v1(src.episode_rows(src.episode(0)))
        rows[1]["rows_sha256"] = "0" * 64

    edit_index(root, "episodes", episodes)
    report = validate(str(root))
    assert report.count("error") == 0
    assert {(f.code, f.episode) for f in report.findings} == {("rows-digest-v1", 1)}


def test_compile_of_a_source_with_fingerprinted_data_files_validates_clean(small_source, small_compiled):
    """Like LeRobot's, the fixture's data files each carry their own `huggingface` schema metadata; a compile
    of it must validate clean. (The v1 digest hashed that metadata, so episodes from any data file but the
    first failed `rows-digest`; the assertion on v1 below shows the fixture exercises exactly that.)"""
    from roboreel.formats.digest import rows_digest_v1

    files = sorted(small_source.glob("data/**/*.parquet"))
    metas = {pq.read_schema(f).metadata[b"huggingface"] for f in files}
    assert len(files) >= 3 and len(metas) == len(files)
    compiled_files = sorted(small_compiled.glob("data/**/*.parquet"))
    assert all(len(pq.read_schema(f).metadata or {}) for f in compiled_files)
    report = validate(str(small_compiled))
    assert report.findings == []
    src, out = LeRobotSource(str(small_source)), LeRobotSource(str(small_compiled))
    v1_differs = [e.index for e in src.episodes
                  if rows_digest_v1(src.episode_rows(e)) != rows_digest_v1(out.episode_rows(out.episode(e.index)))]
    assert v1_differs  # the old digest would have reported these as corrupt
