"""Reading one parquet file into a table, without Arrow's dataset API or its thread pools.

Why: ``pq.read_table`` goes through the dataset scanner and Arrow's CPU and I/O thread pools. Those native threads
outlive the read, and their teardown at interpreter exit is a known source of ``terminate called without an
active exception`` aborts (SIGABRT, exit 134 after the work is done: apache/arrow#34314, #39862) and of hangs at
exit when the source is a Python file object (apache/arrow#50482); ``roboreel validate`` printed CLEAN and then
exited 134 that way, rarely and without a reproducer. ``ParquetFile.read`` on the calling thread gives the same
table (schema metadata included) and starts no thread; it is also cheaper for the small files roboreel reads
(docs/benchmarks.md, "An episode's rows read on the calling thread").
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def read_parquet_table(source: Any, columns: list[str] | None = None) -> pa.Table:
    """The table in ``source`` (a path, a binary file object or a ``pa.BufferReader``), ``columns`` only if
    given, read on the calling thread."""
    return pq.ParquetFile(source).read(columns=columns, use_threads=False)
