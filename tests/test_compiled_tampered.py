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
    assert _errors(out) == [("meta-manifest-mismatch", "meta/tasks.parquet")]


def test_manifest_tasks_or_features_edited_are_errors(out, small_compiled):
    def rename(m: dict) -> None:
        m["tasks"][0]["task"] += " (edited)"
    _edit_json(out / MANIFEST_NAME, rename)
    assert ("meta-manifest-mismatch", "meta/tasks.parquet") in _errors(out)
    shutil.copyfile(small_compiled / MANIFEST_NAME, out / MANIFEST_NAME)
    _edit_json(out / MANIFEST_NAME, lambda m: m["features"].pop("observation.state"))
    assert ("meta-manifest-mismatch", "meta/info.json") in _errors(out)
