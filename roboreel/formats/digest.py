"""Digest of an episode's tabular values, independent of how the rows were stored.

Version 2 (``"v2:<sha256 hex>"``) hashes values only: column names (sorted), a canonical type per column, validity,
and values; lists as per-row lengths plus their flattened values, strings and binaries as lengths plus bytes.
It is blind to what a parquet round trip or a different writer may change without changing a value: schema
metadata (LeRobot writes a ``huggingface`` entry with its own fingerprint into every data file), the name of a
list's child field (``item`` vs ``element``), chunking, zero-copy slice offsets, dictionary encoding, and
string/binary/list offset widths.

Version 1 (a bare hex string, manifests written before 2026-11) hashed Arrow IPC bytes, which carry the schema
metadata: a correct compile of a source with several data files did not match it. It is still computed so old
manifests can be checked, and a v1 mismatch is reported as unverifiable rather than as corruption.
"""

from __future__ import annotations

import hashlib
import io
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

V2_PREFIX = "v2:"


def canonical_type(t: pa.DataType) -> str:
    """A type's name with the details a value-preserving round trip may change folded away."""
    if pa.types.is_dictionary(t):
        return canonical_type(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return f"list<{canonical_type(t.value_type)}>"
    if pa.types.is_fixed_size_list(t):
        return f"fixed_size_list<{canonical_type(t.value_type)}>[{t.list_size}]"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{canonical_type(f.type)}" for f in t) + ">"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    return str(t)


def _blob(h: hashlib._Hash, data: bytes) -> None:
    h.update(struct.pack("<q", len(data)))
    h.update(data)


def _hash_array(h: hashlib._Hash, arr: pa.Array) -> None:
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    h.update(struct.pack("<q", len(arr)))
    _blob(h, np.packbits(np.asarray(arr.is_valid(), dtype=bool)).tobytes())
    if pa.types.is_null(t):
        return
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype("<i8")
        _blob(h, lengths.tobytes())
        _hash_array(h, arr.flatten())  # flatten honours slice offsets and skips values under null entries
        return
    if pa.types.is_struct(t):
        for child in arr.flatten():
            _hash_array(h, child)
        return
    if canonical_type(t) in ("string", "binary"):
        values = pc.fill_null(arr.cast(pa.large_binary()), b"")
        lengths = pc.binary_length(values).to_numpy(zero_copy_only=False).astype("<i8")
        _blob(h, lengths.tobytes())
        offsets = np.frombuffer(values.buffers()[1], dtype="<i8")[values.offset: values.offset + len(values) + 1]
        data = values.buffers()[2]
        _blob(h, b"" if data is None or len(values) == 0 else data.to_pybytes()[offsets[0]: offsets[-1]])
        return
    filled = pc.fill_null(arr, pa.scalar(False if pa.types.is_boolean(t) else 0).cast(t)) if arr.null_count else arr
    _blob(h, np.ascontiguousarray(filled.to_numpy(zero_copy_only=False)).tobytes())


def rows_digest(table: pa.Table) -> str:
    """The v2 digest of ``table``'s values (see the module docstring)."""
    h = hashlib.sha256(b"roboreel rows digest v2\0")
    h.update(struct.pack("<q", table.num_rows))
    for name in sorted(table.column_names):
        col = table.column(name)
        _blob(h, name.encode())
        _blob(h, canonical_type(col.type).encode())
        _hash_array(h, col.combine_chunks() if col.num_chunks != 1 else col.chunk(0))
    return V2_PREFIX + h.hexdigest()


def rows_digest_v1(table: pa.Table) -> str:
    """The legacy v1 digest: sha256 of the table's Arrow IPC stream (schema metadata included)."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        for batch in table.combine_chunks().to_batches():
            w.write_batch(batch)
    return hashlib.sha256(sink.getvalue()).hexdigest()


def check_rows_digest(table: pa.Table, recorded: str) -> bool | None:
    """True/False when ``recorded`` is a v2 digest that does/does not match; for a v1 digest, True on a match
    and None when it differs (v1 depends on storage details, so a difference proves nothing)."""
    if recorded.startswith(V2_PREFIX):
        return rows_digest(table) == recorded
    return True if rows_digest_v1(table) == recorded else None
