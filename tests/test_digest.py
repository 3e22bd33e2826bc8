"""The v2 rows digest hashes values only: blind to storage details, sensitive to every value."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roboreel.formats.digest import check_rows_digest, rows_digest, rows_digest_v1


def _table(**overrides) -> pa.Table:
    cols = {
        "index": pa.array([0, 1, 2], pa.int64()),
        "observation.state": pa.array([[0.5, 1.5], [2.5, None], [4.0, 5.0]], pa.list_(pa.float32(), 2)),
        "action": pa.array([[1.0], [2.0, 3.0], None], pa.list_(pa.float64())),
        "task": pa.array(["ab", "c", None]),
        "done": pa.array([False, None, True]),
    }
    cols.update(overrides)
    return pa.table(cols)


def _roundtrip(t: pa.Table) -> pa.Table:
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return pq.read_table(pa.BufferReader(buf.getvalue()))


def test_storage_details_do_not_change_the_digest():
    t = _table()
    d = rows_digest(t)
    assert d.startswith("v2:")
    meta = {b"huggingface": json.dumps({"fingerprint": "abc"}).encode()}
    assert rows_digest(t.replace_schema_metadata(meta)) == d
    assert rows_digest(_roundtrip(t)) == d  # list child field becomes "element"/"item", metadata added
    element = pa.list_(pa.field("element", pa.float64()))
    assert rows_digest(t.set_column(2, "action", t.column("action").cast(element))) == d
    assert rows_digest(pa.concat_tables([t.slice(0, 1), t.slice(1)])) == d  # two chunks
    big = pa.concat_tables([t, t, t]).combine_chunks()
    assert rows_digest(big.slice(3, 3)) == d  # zero-copy slice with offsets into every buffer
    large = t.set_column(3, "task", t.column("task").cast(pa.large_string()))
    assert rows_digest(large) == d
    assert rows_digest(t.select(list(reversed(t.column_names)))) == d  # column order is not a value
    assert rows_digest(t.set_column(3, "task", t.column("task").dictionary_encode())) == d


@pytest.mark.parametrize("change", [
    {"index": pa.array([0, 1, 3], pa.int64())},
    {"index": pa.array([0, 1, 2], pa.int32())},  # type is part of the value
    {"observation.state": pa.array([[0.5, 1.5], [2.5, 0.0], [4.0, 5.0]], pa.list_(pa.float32(), 2))},  # null -> 0
    {"action": pa.array([[1.0, 2.0], [3.0], None], pa.list_(pa.float64()))},  # same flat values, other rows
    {"action": pa.array([[1.0], [2.0, 3.0], []], pa.list_(pa.float64()))},  # null list -> empty list
    {"task": pa.array(["a", "bc", None])},  # same bytes, other boundaries
    {"task": pa.array(["ab", "c", ""])},
    {"done": pa.array([False, False, True])},
])
def test_every_value_changes_the_digest(change):
    assert rows_digest(_table(**change)) != rows_digest(_table())


def test_renamed_column_changes_the_digest():
    t = _table()
    assert rows_digest(t.rename_columns(["idx", *t.column_names[1:]])) != rows_digest(t)


def test_check_rows_digest_versions():
    t = _table()
    assert check_rows_digest(t, rows_digest(t)) is True
    assert check_rows_digest(t.slice(1), rows_digest(t)) is False
    assert check_rows_digest(t, rows_digest_v1(t)) is True
    # v1 hashed schema metadata: a metadata-only difference is "cannot tell", never a false "corrupt"
    assert check_rows_digest(t.replace_schema_metadata({b"x": b"1"}), rows_digest_v1(t)) is None
