"""The compiled data/ parquet: one file per shard, one row group per episode, values bit-identical to the source.

One row group per episode lets any reader (LeRobot, HF datasets, pyarrow) fetch one episode's rows with one
ranged read, and matches LeRobot's own writer since its PR #3807. Rows are copied as Arrow arrays, never
through Python or pandas, so floats, ints and list columns keep their exact bits and types.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.compile.out import atomic_write
from roboreel.formats.digest import canonical_type
from roboreel.formats.errors import SourceError


def _shape(schema: pa.Schema) -> list[tuple[str, str]]:
    return [(f.name, canonical_type(f.type)) for f in schema]


def check_same_schema(tables: list[tuple[int, str, pa.Table]]) -> pa.Schema:
    """The one schema a compiled data file is written with: the first table's, after checking every
    (episode, source file, rows) has the same columns and value types. Schema metadata and list child-field
    names may differ between source files (LeRobot fingerprints each file's `huggingface` entry)."""
    _, _, first = tables[0]
    schema = first.schema
    for episode, rel, t in tables[1:]:
        if _shape(t.schema) != _shape(schema):
            raise SourceError(
                f"data columns/types differ from episode {tables[0][0]}'s ({t.schema} vs {schema})",
                file=rel, episode=episode,
            )
    return schema


def normalise(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema`` exactly (metadata and child-field names too); values are unchanged.

    Only columns whose type differs are cast: a column of the same type is kept as it is, since pyarrow 26 cannot
    cast a slice of a list<struct> with a null-typed child (the language columns ``lerobot-annotate`` writes:
    "Struct child array has length smaller than expected"), which every metadata-only difference would ask for."""
    if table.schema.equals(schema, check_metadata=True):
        return table
    cols = [c if c.type.equals(f.type) else c.cast(f.type) for c, f in zip(table.columns, schema, strict=True)]
    return pa.Table.from_arrays(cols, schema=schema)


def write_episode_rows(path: str, tables: list[tuple[int, str, pa.Table]]) -> tuple[int, str]:
    """Write episodes' rows (in order) to one parquet file, one row group each, atomically.

    ``tables`` holds (episode, source data file, rows). Returns (size, sha256 hex) of the file.
    """
    schema = check_same_schema(tables)
    buf = pa.BufferOutputStream()
    with pq.ParquetWriter(buf, schema) as pw:
        for _, _, t in tables:
            pw.write_table(normalise(t, schema), row_group_size=max(1, t.num_rows))
    return atomic_write(path, buf.getvalue().to_pybytes())


def episode_row_groups(path: str) -> list[list[int]]:
    """Episode indices found in each row group of a data file (for checks: each list should be one value)."""
    pf = pq.ParquetFile(path)
    return [
        sorted(set(pf.read_row_group(g, columns=["episode_index"]).column(0).to_pylist()))
        for g in range(pf.metadata.num_row_groups)
    ]
