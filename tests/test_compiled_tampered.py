"""A compiled dataset whose files no longer agree with each other: the reader fails naming the shard and episode
instead of a short epoch or shifted windows, and validate reports what LeRobot's view (meta/) and the reader's
(roboreel.json) disagree on.

Each damage keeps every checksum roboreel.json holds consistent (the refs to the index files recomputed), as a
hand edit or a partial re-upload would, so only the cross-checks can see it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.manifest import MANIFEST_NAME
from roboreel.reader import CompiledDataset
from roboreel.validate import validate

EPISODES_INDEX = "index/episodes/chunk-000/file-000.parquet"


@pytest.fixture()
def out(small_compiled, tmp_path) -> Path:
    dst = tmp_path / "out"
    shutil.copytree(small_compiled, dst)
    return dst


def _edit_json(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=1))


def _rehash_index_refs(out: Path) -> None:
    def fix(m: dict) -> None:
        for ref in [m["index"]["shards"], *m["index"]["episodes"]]:
            data = (out / ref["path"]).read_bytes()
            ref["size"], ref["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    _edit_json(out / MANIFEST_NAME, fix)


def _errors(out: Path) -> list[tuple[str, str | None]]:
    return [(f.code, f.file) for f in validate(str(out)).findings if f.severity == "error"]


def test_an_index_length_shorter_than_the_record_fails_the_read_naming_it(out):
    table = pq.read_table(out / EPISODES_INDEX)
    rows = table.to_pylist()
    rows[1]["length"] -= 3
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), out / EPISODES_INDEX)
    _rehash_index_refs(out)
    episode = rows[1]["index"]
    with pytest.raises(CompiledFormatError, match=r"record says length \d+, the index \d+") as err:
        list(CompiledDataset(str(out), shuffle=False))
    assert err.value.episode == episode and err.value.file.startswith("shards/")
    assert _errors(out)  # validate already caught it


def test_a_manifest_fps_the_records_do_not_share_fails_the_read(out):
    _edit_json(out / MANIFEST_NAME, lambda m: m.update(fps=2 * m["fps"]))
    with pytest.raises(CompiledFormatError, match=r"record says fps \d+, roboreel.json \d+"):
        list(CompiledDataset(str(out), shuffle=False))


def test_meta_that_disagrees_with_the_manifest_is_an_error(out, small_compiled):
    assert _errors(out) == []
    _edit_json(out / "meta/info.json", lambda i: i["features"]["action"].update(shape=[3]))
    assert ("meta-manifest-mismatch", "meta/info.json") in _errors(out)
    shutil.copyfile(small_compiled / "meta/info.json", out / "meta/info.json")
    tasks = pq.read_table(out / "meta/tasks.parquet")
    column = tasks.column_names.index("task_index")
    swapped = tasks.set_column(column, "task_index", pa.array(tasks.column("task_index").to_pylist()[::-1],
                                                              type=tasks.schema.field("task_index").type))
    pq.write_table(swapped, out / "meta/tasks.parquet")
    assert sorted(_errors(out)) == [("meta-checksum", "meta/tasks.parquet"),
                                    ("meta-manifest-mismatch", "meta/tasks.parquet")]


def test_manifest_tasks_or_features_edited_are_errors(out, small_compiled):
    def rename(m: dict) -> None:
        m["tasks"][0]["task"] += " (edited)"
    _edit_json(out / MANIFEST_NAME, rename)
    assert ("meta-manifest-mismatch", "meta/tasks.parquet") in _errors(out)
    shutil.copyfile(small_compiled / MANIFEST_NAME, out / MANIFEST_NAME)
    _edit_json(out / MANIFEST_NAME, lambda m: m["features"].pop("observation.state"))
    assert ("meta-manifest-mismatch", "meta/info.json") in _errors(out)


def test_the_manifest_records_every_meta_file_finalize_wrote(small_compiled):
    recorded = json.loads((small_compiled / MANIFEST_NAME).read_text())["meta_files"]
    written = sorted(str(p.relative_to(small_compiled)) for p in (small_compiled / "meta").rglob("*") if p.is_file())
    assert sorted(recorded) == written and "meta/stats.json" in recorded
    for rel, digest in recorded.items():
        assert hashlib.sha256((small_compiled / rel).read_bytes()).hexdigest() == digest


def test_edited_stats_fail_validate_and_the_reader(out):
    """stats.json has no counterpart in roboreel.json, yet lerobot-train normalizes every feature with it: a
    changed mean (valid JSON, every other file intact) used to pass validate and reach the policy."""
    _edit_json(out / "meta/stats.json", lambda st: st["action"].update(mean=[v + 1.0 for v in st["action"]["mean"]]))
    assert _errors(out) == [("meta-checksum", "meta/stats.json")]
    with pytest.raises(CompiledFormatError, match="sha256 differs") as err:
        _ = CompiledDataset(str(out)).meta.stats
    assert err.value.file == "meta/stats.json"


def test_a_recorded_stats_file_removed_is_an_error_not_no_stats(out):
    (out / "meta/stats.json").unlink()
    assert ("meta-missing", "meta/stats.json") in _errors(out)
    with pytest.raises(CompiledFormatError, match="records this file, but it is not there"):
        _ = CompiledDataset(str(out)).meta.stats


def test_a_manifest_without_meta_files_reads_and_validates_as_before(out):
    """Compiles from before roboreel recorded meta/ checksums have no ``meta_files``: nothing to check there."""
    _edit_json(out / MANIFEST_NAME, lambda m: m.pop("meta_files"))
    assert _errors(out) == []
    assert CompiledDataset(str(out)).meta.stats["action"]["mean"].dtype.kind == "f"


@pytest.mark.parametrize("bad", [{"meta/stats.json": "abc"}, {"data/x.parquet": "0" * 64}, ["meta/stats.json"]])
def test_malformed_meta_files_refuse_the_manifest(out, bad):
    _edit_json(out / MANIFEST_NAME, lambda m: m.update(meta_files=bad))
    with pytest.raises(CompiledFormatError, match="meta_files"):
        CompiledDataset(str(out))
