"""Integrity end to end: the manifest accounts for every source row and frame (counts and checksums), and
validate re-checks them, even against damage whose byte checksums were recomputed to match (a writer bug, not
bit rot), so only the value-level checks can see it."""

from __future__ import annotations

import tarfile

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from handmade import rewrite_shard
from torchcodec.decoders import VideoDecoder

from roboreel.formats import shard as sh
from roboreel.formats.errors import RoboreelError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import load_manifest
from roboreel.reader import CompiledDataset
from roboreel.synth import read
from roboreel.validate import validate

from .damage import remux


def test_manifest_accounts_for_every_source_row_and_frame(small_source, small_compiled):
    src = LeRobotSource(str(small_source))
    m = load_manifest(str(small_compiled))
    assert [(e.index, e.length, e.from_index, e.to_index, tuple(e.tasks)) for e in m.episodes] == [
        (e.index, e.length, e.from_index, e.to_index, e.tasks) for e in src.episodes]
    assert m.total_frames == src.info.raw["total_frames"]
    # rows: the source rows' hash, recorded at compile time, for every episode
    assert [e.rows_sha256 for e in m.episodes] == [sh.rows_digest(src.episode_rows(e)) for e in src.episodes]
    # frames: every clip holds exactly the episode's frames, in order, each showing itself
    cams = m.camera_keys
    for s in m.shards:
        with tarfile.open(small_compiled / s.path) as tf:
            members = {x.name: tf.extractfile(x).read() for x in tf.getmembers()}
        for ep in s.episodes:
            e = m.episode(ep)
            for c, cam in enumerate(cams):
                dec = VideoDecoder(members[sh.clip_member(ep, cam)])
                assert [tuple(vars(read(dec[k])).values()) for k in range(len(dec))] == [
                    (e.from_index + k, ep, c) for k in range(e.length)]
    assert validate(str(small_compiled)).exit_code == 0


def _edit_rows(members: dict[str, bytes], episode: int) -> dict[str, bytes]:
    """One action value of one frame changed in the record's rows (one row group kept)."""
    name = sh.rows_member(episode)
    rows = sh.parquet_bytes_to_table(members[name])
    action = rows.column("action").to_pylist()
    action[3][0] += 1.0
    rows = rows.set_column(rows.column_names.index("action"), "action",
                           pa.array(action, rows.schema.field("action").type))
    return {**members, name: sh.table_to_parquet_bytes(rows)}


def test_validate_sees_changed_rows_behind_recomputed_checksums(small_compiled, copy_of):
    root = copy_of(small_compiled, "out")
    m = load_manifest(str(root))
    ep = m.shards[1].episodes[0]
    rewrite_shard(root, 1, lambda members: _edit_rows(members, ep))  # member and shard sha256 now match
    report = validate(str(root))
    assert report.exit_code == 1
    assert {(f.code, f.file, f.episode) for f in report.findings} == {("rows-digest", m.shards[1].path, ep)}


def test_validate_sees_changed_values_in_the_lerobot_view(small_compiled, copy_of):
    """data/ (what LeRobot reads) is hashed against the same rows_sha256 as the shard records."""
    root = copy_of(small_compiled, "out")
    src = LeRobotSource(str(root))
    e = src.episodes[5]
    path = root / e.data_path
    table = pq.read_table(path)
    state = table.column("observation.state").to_pylist()
    row = table.column("index").to_pylist().index(e.from_index + 2)
    state[row][1] = -state[row][1] - 1.0
    table = table.set_column(table.column_names.index("observation.state"), "observation.state",
                             pa.array(state, table.schema.field("observation.state").type))
    with pq.ParquetWriter(path, table.schema) as w:  # one row group per episode, as compiled
        for ep in dict.fromkeys(table.column("episode_index").to_pylist()):
            w.write_table(table.filter(pc.equal(table.column("episode_index"), ep)))
    report = validate(str(root))
    assert {(f.code, f.file, f.episode) for f in report.findings} == {("rows-digest", e.data_path, e.index)}
    assert validate(str(root), fast=True).exit_code == 0  # --fast trades this check for speed


def test_dropped_frame_behind_recomputed_checksums_is_seen_and_never_served(small_compiled, copy_of, tmp_path):
    root = copy_of(small_compiled, "out")
    m = load_manifest(str(root))
    ep = m.shards[2].episodes[1]
    cam = m.camera_keys[0]
    name = sh.clip_member(ep, cam)

    def drop_last_frame(members: dict[str, bytes]) -> dict[str, bytes]:
        clip = tmp_path / "clip.mp4"
        clip.write_bytes(members[name])
        remux(clip, keep=slice(None, -1))
        return {**members, name: clip.read_bytes()}

    rewrite_shard(root, 2, drop_last_frame)
    report = validate(str(root))
    assert {(f.code, f.file, f.episode) for f in report.findings} == {("clip-frame-count", m.shards[2].path, ep)}
    ds = CompiledDataset(str(root), episodes=[ep], shuffle=False)
    seen = []
    with pytest.raises(RoboreelError, match=rf"{m.shards[2].path}.*episode {ep}") as err:
        for sample in ds:
            seen.append(int(sample["frame_index"]))
    assert max(seen, default=-1) < m.episode(ep).length - 1, err.value  # the missing frame was never faked
