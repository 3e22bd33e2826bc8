"""roboreel validate of compiled outputs: a clean compile passes; each kind of damage to shards, records, the
manifest or the v3 side, built here on real bytes, is reported with its place; exit codes through the CLI and its
JSON."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from handmade import edit_index, hand_compile, rewrite_shard
from support.validating import copy, drop_last_frames, run_json

from roboreel.cli import main
from roboreel.formats import shard as sh
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import load_manifest
from roboreel.validate import validate


@pytest.fixture(scope="module")
def hand_compiled(tmp_path_factory, small_source) -> Path:
    """small_source compiled by hand (tests/handmade.py) into 3 shards of 3, 3, 2 episodes (read-only)."""
    out = tmp_path_factory.mktemp("hand") / "compiled"
    hand_compile(small_source, out, per_shard=3)
    return out


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
        drop_last_frames(tmp, 2)
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
