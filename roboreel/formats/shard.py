"""Shard members: naming and (de)serialisation of one episode record.

A shard is a plain tar (webdataset conventions: members grouped by the key before the first dot). One episode
is one record, keyed by its zero-padded episode index::

    000042.json                         episode metadata (EpisodeRecord.meta)
    000042.observation.images.top.mp4   one HEVC clip per camera, pts from 0, frame k = episode frame k
    000042.parquet                      the episode's rows, one row group

Members are written in sorted name order, so ``.json`` comes first and a streaming reader knows what follows.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.formats.digest import rows_digest  # noqa: F401  (re-exported: records and data/ share it)
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.parquetio import read_parquet_table

SHARD_DIR = "shards"
KEY_DIGITS = 6
CLIP_SUFFIX = ".mp4"


def episode_key(episode: int) -> str:
    """The webdataset ``__key__`` of an episode's record."""
    return f"{episode:0{KEY_DIGITS}d}"


def shard_path(shard: int) -> str:
    """Path of shard number ``shard`` relative to the dataset root."""
    return f"{SHARD_DIR}/shard-{shard:06d}.tar"


def json_member(episode: int) -> str:
    return f"{episode_key(episode)}.json"


def rows_member(episode: int) -> str:
    return f"{episode_key(episode)}.parquet"


def clip_member(episode: int, camera: str) -> str:
    return f"{episode_key(episode)}.{camera}{CLIP_SUFFIX}"


def split_member(name: str) -> tuple[str, str]:
    """``"000042.observation.images.top.mp4"`` -> ``("000042", "observation.images.top.mp4")`` (webdataset's rule)."""
    base = name.rsplit("/", 1)[-1]
    key, _, ext = base.partition(".")
    return key, ext


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str, chunk: int = 8 << 20) -> str:
    """sha256 hex of a local file, read in chunks (hashlib releases the GIL on large updates)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def table_to_parquet_bytes(table: pa.Table) -> bytes:
    """Serialise rows as one row group, deterministically (same table, same pyarrow -> same bytes)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=max(1, table.num_rows), compression="zstd", write_statistics=True)
    return buf.getvalue()


def parquet_bytes_to_table(data: bytes) -> pa.Table:
    """An episode's rows. ``ParquetFile.read`` on the calling thread, not ``pq.read_table``: the dataset API and
    Arrow's thread pool cost 1.4-3.1 ms of CPU for a 75-row episode against 0.4-0.5 ms (docs/benchmarks.md), and
    every DataLoader worker reads one record per pooled episode. Same table, schema metadata included."""
    return read_parquet_table(pa.BufferReader(data))


@dataclass
class EpisodeRecord:
    """One episode as stored in a shard: metadata, rows and one compressed clip per camera."""

    index: int
    meta: dict[str, Any]
    rows: pa.Table
    clips: dict[str, bytes] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return int(self.meta["length"])

    def to_members(self) -> dict[str, bytes]:
        """Member name -> bytes, in the order they are written (sorted)."""
        out = {json_member(self.index): json.dumps(self.meta, sort_keys=True).encode()}
        out[rows_member(self.index)] = table_to_parquet_bytes(self.rows)
        for cam, data in self.clips.items():
            out[clip_member(self.index, cam)] = data
        return dict(sorted(out.items()))

    def to_sample(self) -> dict[str, Any]:
        """The webdataset sample dict (``__key__`` plus extension -> bytes) for ``TarWriter.write``."""
        sample: dict[str, Any] = {"__key__": episode_key(self.index)}
        for name, data in self.to_members().items():
            sample[split_member(name)[1]] = data
        return sample

    @classmethod
    def from_members(cls, members: dict[str, bytes], *, shard: str = "?") -> EpisodeRecord:
        """Rebuild a record from member name -> bytes (names with or without a directory prefix)."""
        by_ext: dict[str, bytes] = {}
        keys = set()
        for name, data in members.items():
            if name.startswith("__"):
                continue
            key, ext = split_member(name)
            keys.add(key)
            by_ext[ext] = data
        if len(keys) != 1:
            raise CompiledFormatError(f"a record must hold one episode key, got {sorted(keys)}", file=shard)
        return cls.from_sample({"__key__": keys.pop(), **by_ext}, shard=shard)

    @classmethod
    def from_sample(cls, sample: dict[str, Any], *, shard: str = "?") -> EpisodeRecord:
        """Rebuild a record from a webdataset sample dict (extension -> bytes).

        Anything malformed (key, json, parquet, missing clip) raises CompiledFormatError naming the shard and,
        once the key is read, the episode: readers may then trust ``meta["length"]`` and ``meta["cameras"]``.
        """
        key = str(sample.get("__key__")).rsplit("/", 1)[-1]
        if not (key.isascii() and key.isdigit()):  # int() would also take "-3", " 7", "1_0" or other scripts' digits
            raise CompiledFormatError(f"record key {sample.get('__key__')!r} is not an episode index", file=shard)
        episode = int(key)
        if "json" not in sample or "parquet" not in sample:
            raise CompiledFormatError("record lacks its .json or .parquet member", file=shard, episode=episode)
        try:
            meta = json.loads(sample["json"])
            rows = parquet_bytes_to_table(sample["parquet"])
        except (ValueError, RecursionError, pa.ArrowException, OSError) as e:
            raise CompiledFormatError(f"unreadable record member: {e}", file=shard, episode=episode) from e
        if not isinstance(meta, dict):
            raise CompiledFormatError(f"record json is not an object: {meta!r:.100}", file=shard, episode=episode)
        length, cams = meta.get("length"), meta.get("cameras", {})
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise CompiledFormatError(f"record json length {length!r} is not a frame count", file=shard,
                                      episode=episode)
        if not isinstance(cams, dict) or not all(isinstance(c, str) for c in cams):
            raise CompiledFormatError(f"record json cameras {cams!r:.100} is not an object keyed by camera",
                                      file=shard, episode=episode)
        clips = {}
        for cam in cams:
            ext = f"{cam}{CLIP_SUFFIX}"
            if ext not in sample:
                raise CompiledFormatError(f"record lacks the clip of camera {cam!r}", file=shard, episode=episode)
            clips[cam] = bytes(sample[ext])
        return cls(index=episode, meta=meta, rows=rows, clips=clips)
