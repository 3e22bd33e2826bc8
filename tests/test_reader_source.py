"""Shard streaming: partial slices, foreign tar layouts, checksums, transient-error classification, prefetch."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import logging
import shutil
import tarfile

import aiohttp
import pytest
from support.datasets import compiled_pair

from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.manifest import load_manifest, write_manifest
from roboreel.reader.fetch._prefetch import Prefetcher
from roboreel.reader.fetch._source import SliceReader, Store, is_transient, record_spans
from roboreel.reader.plan._epoch import Slice


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):  # 3 shards of 3, 3 and 2 episodes
    return compiled_pair(tmp_path_factory, episodes_per_shard=3)[1]


def read_all(root, slices):
    reader = SliceReader(Store(str(root)), load_manifest(str(root)))
    return [(shard, rec.index, rec.rows.to_pydict(), rec.clips) for shard, rec in reader.records(slices)], reader


def test_record_spans_match_the_tar(compiled):
    m = load_manifest(str(compiled))
    for i, shard in enumerate(m.shards):
        with tarfile.open(compiled / shard.path) as tar:
            first = {}
            for info in tar:
                first.setdefault(int(info.name.split(".")[0]), info.offset)
        spans = record_spans(m.index.shard_entries(i))
        assert {e: s for e, (s, _) in spans.items()} == first
        assert max(end for _, end in spans.values()) <= shard.size


def test_partial_slices_read_only_their_records(compiled):
    m = load_manifest(str(compiled))
    whole, _ = read_all(compiled, [Slice(i, tuple(s.episodes)) for i, s in enumerate(m.shards)])
    eps = m.shards[0].episodes
    part, reader = read_all(compiled, [Slice(0, (eps[1],)), Slice(0, (eps[2],))])
    assert [r[1] for r in part] == [eps[1], eps[2]]
    assert part == [r for r in whole if r[1] in eps[1:]]
    spans = record_spans(m.index.shard_entries(0))
    assert reader.stats.bytes_read == sum(spans[e][1] - spans[e][0] for e in eps[1:])  # nothing else was read


def test_foreign_tar_layout_falls_back_to_reading_the_shard(compiled, tmp_path, caplog):
    """A shard repacked as PAX with extended headers: computed offsets miss, the reader notices and recovers."""
    root = tmp_path / "pax"
    shutil.copytree(compiled, root)
    m = load_manifest(str(root))
    path = root / m.shards[0].path
    buf = io.BytesIO()
    with tarfile.open(path) as src, tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for info in src:
            info.pax_headers = {"comment": "x" * 700}
            dst.addfile(info, src.extractfile(info))
    path.write_bytes(buf.getvalue())
    m.shards[0] = dataclasses.replace(m.shards[0], size=len(buf.getvalue()),
                                      sha256=hashlib.sha256(buf.getvalue()).hexdigest())
    write_manifest(root, m)
    eps = m.shards[0].episodes
    want, _ = read_all(compiled, [Slice(0, tuple(eps[1:]))])
    with caplog.at_level(logging.INFO, logger="roboreel.reader.fetch._source"):
        got, _ = read_all(root, [Slice(0, tuple(eps[1:]))])
    assert got == want
    assert any("reading the shard from its start" in r.getMessage() for r in caplog.records)


def test_corrupt_member_names_shard_and_episode(compiled, tmp_path):
    root = tmp_path / "bad"
    shutil.copytree(compiled, root)
    m = load_manifest(str(root))
    ep = m.shards[1].episodes[1]
    start, _ = record_spans(m.index.shard_entries(1))[ep]
    data = bytearray((root / m.shards[1].path).read_bytes())
    data[start + 512 + 10] ^= 0xFF  # inside the record's first member (its json)
    (root / m.shards[1].path).write_bytes(bytes(data))
    with pytest.raises(CompiledFormatError, match=rf"sha256.*file {m.shards[1].path}, episode {ep}"):
        read_all(root, [Slice(1, tuple(m.shards[1].episodes))])


def test_transient_errors_are_told_apart():
    info = aiohttp.RequestInfo(url="http://x", method="GET", headers={}, real_url="http://x")
    assert is_transient(aiohttp.ClientResponseError(info, (), status=503))
    assert is_transient(aiohttp.ClientResponseError(info, (), status=429))
    assert not is_transient(aiohttp.ClientResponseError(info, (), status=403))
    assert is_transient(aiohttp.ClientPayloadError("Response payload is not completed"))
    assert is_transient(aiohttp.ServerDisconnectedError())
    assert is_transient(ConnectionResetError(errno.ECONNRESET, "reset"))
    assert is_transient(TimeoutError())
    assert not is_transient(FileNotFoundError("gone"))
    assert not is_transient(ValueError("bad"))
    wrapped = RuntimeError("while reading")
    wrapped.__cause__ = ConnectionResetError()
    assert is_transient(wrapped)


def test_prefetcher_forwards_errors_and_stops_early():
    def boom():
        yield 1
        raise CompiledFormatError("broken record", file="shards/x.tar", episode=3)

    p = Prefetcher(boom, 2)
    assert next(p) == 1
    with pytest.raises(CompiledFormatError, match="episode 3"):
        next(p)
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    p = Prefetcher(endless, 2)
    assert [next(p) for _ in range(3)] == [0, 1, 2]
    p.close()
    assert not p._thread.is_alive() and len(produced) <= 3 + 2 + 2  # bounded read-ahead, then stopped
