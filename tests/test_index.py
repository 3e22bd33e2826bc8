"""The columnar index (format 2): chunked files read lazily, nothing per episode in a pickled dataset, format 1
manifests still read, and a damaged index reported by file (validate) or raised by name (reader)."""

from __future__ import annotations

import json
import pickle
import shutil

import pyarrow.parquet as pq
import pytest
import torch
from support.datasets import assert_same_sample, compiled_pair

from roboreel.formats import index as ix
from roboreel.formats import manifest as mf
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.index_write import file_digest
from roboreel.reader import CompiledDataset
from roboreel.validate import validate


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)


def _samples(root, **kw) -> list[dict]:
    return list(CompiledDataset(str(root), shuffle=True, seed=3, **kw))


def test_layout_and_descriptor(pair):
    _, compiled = pair
    doc = json.loads((compiled / mf.MANIFEST_NAME).read_text())
    assert doc["format_version"] == 2 and "episodes" not in doc and "shards" not in doc
    d = doc["index"]
    m = mf.load_manifest(str(compiled))
    assert d["episodes_total"] == len(m.episodes) == 8 and d["frames_total"] == m.total_frames
    for ref in [d["shards"], *d["episodes"]]:
        assert file_digest(str(compiled / ref["path"])) == {"size": ref["size"], "sha256": ref["sha256"]}
        assert pq.ParquetFile(compiled / ref["path"]).metadata.num_rows == ref["rows"]
    shards = pq.read_table(compiled / ix.SHARDS_PATH).to_pylist()
    assert [s["episodes"] for s in shards] == [2, 2, 2, 2] and [s["first"] for s in shards] == [0, 2, 4, 6]


def test_chunked_index_reads_the_same(pair, tmp_path, monkeypatch):
    """Small row groups and files (as at a million episodes): several files, several row groups each; entries
    and samples are the same as with one file."""
    _, compiled = pair
    m = mf.load_manifest(str(compiled))
    monkeypatch.setattr(ix, "ROW_GROUP_ROWS", 2)
    monkeypatch.setattr(ix, "ROWS_PER_FILE", 6)  # 3 row groups a file: group 3 is the second file's first
    monkeypatch.setattr(ix, "FILES_PER_CHUNK", 1)
    root = tmp_path / "chunked"
    shutil.copytree(compiled, root)
    shutil.rmtree(root / ix.INDEX_DIR)
    m2 = mf.Manifest(fps=m.fps, features=m.features, cameras=m.cameras, tasks=m.tasks, shards=m.shards,
                     episodes=m.episodes, source=m.source, settings=m.settings, created_by=m.created_by)
    mf.write_manifest(root, m2)
    files = [r["path"] for r in m2.index_files["episodes"]]
    assert files == ["index/episodes/chunk-000/file-000.parquet", "index/episodes/chunk-001/file-000.parquet"]
    assert pq.ParquetFile(root / files[0]).metadata.num_row_groups == 3
    back = mf.load_manifest(str(root))
    assert back.episodes == m.episodes and back.shards == m.shards
    assert validate(str(root)).exit_code == 0
    got, want = _samples(root), _samples(compiled)
    assert len(got) == len(want) == m.total_frames
    for g, w in zip(got, want, strict=True):
        assert_same_sample(g, w, [c.key for c in m.cameras])
    # a file that is not whole row groups would shift every later group: refused when the manifest is read
    doc = json.loads((root / mf.MANIFEST_NAME).read_text())
    doc["index"]["episodes"][0]["rows"] = 5
    (root / mf.MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(CompiledFormatError, match="not whole row groups"):
        mf.load_manifest(str(root))


def test_construction_and_len_read_no_episode_file(pair, tmp_path):
    """Construction and len() need only roboreel.json and the shard table; the first read of episode rows
    names the missing file."""
    _, compiled = pair
    root = tmp_path / "no-episodes"
    shutil.copytree(compiled, root)
    shutil.rmtree(root / "index" / "episodes")
    ds = CompiledDataset(str(root), batch_size=4)
    assert len(ds) == mf.load_manifest(str(compiled)).total_frames
    assert ds.worker_samples(2) == CompiledDataset(str(compiled), batch_size=4).worker_samples(2)
    with pytest.raises(CompiledFormatError, match=r"index file missing.*index/episodes/chunk-000/file-000.parquet"):
        next(iter(ds))


def test_pickled_dataset_carries_no_episode_data(pair):
    """A DataLoader worker receives the dataset pickled: after iterating (everything loaded) the pickle is
    as small as before, and the unpickled copy yields the same samples."""
    _, compiled = pair
    ds = CompiledDataset(str(compiled), shuffle=True, seed=3)
    before = len(pickle.dumps(ds))
    first = list(ds)
    after = pickle.dumps(ds)
    assert len(after) <= before + 256  # the iterator's position: a few scalars
    copy = pickle.loads(after)
    copy.set_epoch(0)
    again = list(copy)
    assert [int(s["index"]) for s in again] == [int(s["index"]) for s in first]
    assert torch.equal(again[5]["observation.state"], first[5]["observation.state"])


def test_format_1_manifest_still_reads(pair, tmp_path):
    """An output written before the index (every episode in roboreel.json) reads and validates unchanged."""
    _, compiled = pair
    m = mf.load_manifest(str(compiled))
    root = tmp_path / "v1"
    shutil.copytree(compiled, root)
    shutil.rmtree(root / ix.INDEX_DIR)
    doc = json.loads((compiled / mf.MANIFEST_NAME).read_text())
    del doc["index"]
    doc["format_version"] = 1
    doc["shards"] = [{"path": s.path, "size": s.size, "sha256": s.sha256, "episodes": s.episodes} for s in m.shards]
    doc["episodes"] = [{**e.__dict__, "members": [x.__dict__ for x in e.members]} for e in m.episodes]
    (root / mf.MANIFEST_NAME).write_text(json.dumps(doc))
    v1 = mf.load_manifest(str(root))
    assert v1.format_version == 1 and v1.index_files is None and v1.episodes == m.episodes
    assert validate(str(root)).exit_code == 0
    got, want = _samples(root), _samples(compiled)
    assert [int(s["index"]) for s in got] == [int(s["index"]) for s in want]


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_damaged_index_file(pair, tmp_path, damage):
    """validate: a fatal finding naming the index file (exit 2); reader: CompiledFormatError naming it."""
    _, compiled = pair
    root = tmp_path / damage
    shutil.copytree(compiled, root)
    rel = "index/episodes/chunk-000/file-000.parquet"
    path = root / rel
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        path.unlink()
    report = validate(str(root))
    assert report.exit_code == 2
    assert any(f.file == rel and f.code in ("index-missing", "index-checksum-mismatch") for f in report.findings)
    if damage != "flip":  # a flipped byte inside compressed values may still parse: validate's sha256 catches it
        with pytest.raises(CompiledFormatError, match=rel):
            list(CompiledDataset(str(root)))


def test_inconsistent_index_is_an_error(pair, tmp_path):
    """Index files whose checksums match roboreel.json but whose shard table lies about frames."""
    _, compiled = pair
    root = tmp_path / "lie"
    shutil.copytree(compiled, root)
    table = pq.read_table(root / ix.SHARDS_PATH)
    frames = table.column("frames").to_pylist()
    frames[1] += 1
    pq.write_table(table.set_column(table.column_names.index("frames"), "frames",
                                    __import__("pyarrow").array(frames, type=table.schema.field("frames").type)),
                   root / ix.SHARDS_PATH)
    doc = json.loads((root / mf.MANIFEST_NAME).read_text())
    doc["index"]["shards"].update(file_digest(str(root / ix.SHARDS_PATH)))
    (root / mf.MANIFEST_NAME).write_text(json.dumps(doc))
    report = validate(str(root))
    assert report.exit_code == 1
    assert any(f.code == "manifest-inconsistent" and "shard 1" in f.message for f in report.findings)
