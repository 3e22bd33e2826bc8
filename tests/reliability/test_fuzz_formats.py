"""Property tests of the compiled format's parsers: the manifest (``Manifest.from_json``), shard records
(``EpisodeRecord.from_sample``), the reader's record offsets, and ``validate`` on mutated manifests.

The contract: any input either parses into something every reader can use, or raises CompiledFormatError
(never a KeyError, TypeError, AttributeError, ... from deep inside); validate always returns a report.
Mutations start from a real compiled dataset, so they reach the deep code paths, not just the first check.
"""

from __future__ import annotations

import copy
import json
import shutil
import tarfile
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roboreel.compile.out import ShardWriter
from roboreel.formats import manifest as mf
from roboreel.formats import shard as sh
from roboreel.formats.errors import CompiledFormatError
from roboreel.reader.fetch._source import record_spans
from roboreel.validate import validate

from .fuzz import budget, json_values


@pytest.fixture(scope="module")
def manifest_doc(small_compiled) -> dict:
    return json.loads((small_compiled / mf.MANIFEST_NAME).read_text())


@pytest.fixture(scope="module")
def record_sample(small_compiled) -> dict[str, Any]:
    """The first record of the first shard as a webdataset sample (``__key__`` + extension -> bytes)."""
    m = mf.load_manifest(str(small_compiled))
    with tarfile.open(small_compiled / m.shards[0].path) as tf:
        members = {x.name: tf.extractfile(x).read() for x in tf.getmembers()}
    key = sh.episode_key(m.shards[0].episodes[0])
    sample: dict[str, Any] = {"__key__": key}
    for name, data in members.items():
        k, ext = sh.split_member(name)
        if k == key:
            sample[ext] = data
    return sample


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys / indices) into a JSON document, the root excluded."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out.append((*prefix, k))
        out += paths(v, (*prefix, k))
    return out


@st.composite
def mutated(draw, doc: dict) -> dict:
    """``doc`` with 1-3 mutations: a value deleted, replaced by any JSON value, or retyped (number <-> string)."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(doc)))
        parent = doc
        for k in where[:-1]:
            parent = parent[k]
        key = where[-1]
        op = draw(st.sampled_from(["delete", "replace", "retype"]))
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(json_values)
        else:
            v = parent[key]
            parent[key] = str(v) if not isinstance(v, str) else draw(st.integers(-5, 5) | st.floats() | st.none())
        if not paths(doc):
            break
    return doc


def usable(m: mf.Manifest, root: str | None = None) -> None:
    """What readers do with a manifest, none of which may raise on one that parsed, but CompiledFormatError
    from the index files, which are read lazily (a descriptor naming a missing or mismatched file)."""
    assert isinstance(m.camera_keys, list)
    assert isinstance(m.features, dict) and all(isinstance(f, dict) for f in m.features.values())
    try:
        assert isinstance(m.total_frames, int) and isinstance(m.num_episodes, int)
        for e in m.episodes:
            assert isinstance(e.to_index - e.from_index - e.length + e.shard, int)
            assert all(isinstance(x.size + 0, int) and isinstance(x.name + x.sha256, str) for x in e.members)
            m.episode(e.index)
        for s in m.shards:
            assert isinstance(s.size + sum(s.episodes), int) and isinstance(s.path + s.sha256, str)
    except CompiledFormatError:
        return
    if m.index_files is not None:
        assert mf.Manifest.from_json(m.to_json(), root=root).to_json() == m.to_json()


@budget(300)
@given(st.binary(max_size=200) | st.text(max_size=200) | json_values.map(json.dumps))
def test_manifest_from_arbitrary_bytes(data):
    with pytest.raises(CompiledFormatError):
        mf.Manifest.from_json(data)


@budget(300)
@given(st.dictionaries(st.text(max_size=12), json_values, max_size=8))
def test_manifest_from_arbitrary_fields(fields):
    doc = {**fields, "format": mf.FORMAT_NAME, "format_version": mf.FORMAT_VERSION}
    try:
        m = mf.Manifest.from_json(json.dumps(doc))
    except CompiledFormatError:
        return
    usable(m)


def test_deep_nesting_is_a_format_error():
    with pytest.raises(CompiledFormatError):
        mf.Manifest.from_json("[" * 100_000 + "]" * 100_000)


@budget(400)
@given(st.data())
def test_mutated_manifest_parses_usable_or_raises_format_error(manifest_doc, small_compiled, data):
    doc = data.draw(mutated(manifest_doc))
    try:
        m = mf.Manifest.from_json(json.dumps(doc), root=str(small_compiled))
    except CompiledFormatError:
        return
    usable(m, str(small_compiled))


@pytest.fixture(scope="module")
def compiled_copy(small_compiled, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz") / "compiled"
    shutil.copytree(small_compiled, root)
    return root


@budget(25)
@given(st.data())
def test_validate_survives_any_mutated_manifest(compiled_copy, manifest_doc, data):
    """validate never raises on a damaged manifest: it reports (fatal -> exit 2, errors -> exit 1)."""
    doc = data.draw(mutated(manifest_doc))
    (compiled_copy / mf.MANIFEST_NAME).write_text(json.dumps(doc))
    report = validate(str(compiled_copy))
    assert report.exit_code in (0, 1, 2)
    if doc != manifest_doc and report.exit_code == 0:
        # a mutation validate accepts must be harmless to readers
        usable(mf.load_manifest(str(compiled_copy)), str(compiled_copy))


@st.composite
def mutated_sample(draw, sample: dict[str, Any]) -> dict[str, Any]:
    sample = dict(sample)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(sample)))
        op = draw(st.sampled_from(["delete", "random", "truncate", "json", "key"]))
        if op == "delete":
            sample.pop(key)
        elif op == "random":
            sample[key] = draw(st.binary(max_size=64))
        elif op == "truncate" and isinstance(sample[key], bytes):
            sample[key] = sample[key][: draw(st.integers(0, max(0, len(sample[key]) - 1)))]
        elif op == "json":
            sample["json"] = json.dumps(draw(json_values)).encode()
        else:
            sample["__key__"] = draw(st.text(max_size=8) | st.integers(-3, 10**7).map(str))
        if not sample:
            break
    return sample


@budget(400)
@given(st.data())
def test_mutated_record_parses_usable_or_raises_format_error(record_sample, data):
    sample = data.draw(mutated_sample(record_sample))
    try:
        rec = sh.EpisodeRecord.from_sample(sample, shard="shards/x.tar")
    except CompiledFormatError as e:
        assert "shards/x.tar" in str(e)
        return
    assert isinstance(rec.length, int) and rec.length >= 0 and rec.index >= 0
    assert rec.rows.num_rows >= 0 and all(isinstance(c, bytes) for c in rec.clips.values())
    assert rec.index == int(str(sample["__key__"]).rsplit("/", 1)[-1])  # webdataset keys may carry a directory


@budget(60)
@given(st.lists(st.lists(st.integers(0, 3000), min_size=1, max_size=3), min_size=1, max_size=5),
       st.lists(st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=40),
                min_size=1, max_size=3, unique=True), st.integers(0, 10**5))
def test_record_spans_are_where_the_writer_put_each_record(tmp_path_factory, clip_sizes, cameras, first):
    """The reader range-reads a record at the bytes the manifest's member sizes give (512-byte USTAR headers,
    data padded to 512): for any member sizes and camera names, that is exactly where the compiler's writer
    put the record."""
    import pyarrow as pa

    path = tmp_path_factory.mktemp("offsets") / "shard.tar"
    entries = []
    with ShardWriter(str(path)) as w:
        for n, sizes in enumerate(clip_sizes):
            ep = first + n
            clips = {cam: bytes([n % 256]) * sizes[i % len(sizes)] for i, cam in enumerate(cameras)}
            rows = pa.table({"index": pa.array(range(n + 1), pa.int64())})
            rec = sh.EpisodeRecord(index=ep, meta={"length": n + 1, "cameras": dict.fromkeys(cameras, {})},
                                   rows=rows, clips=clips)
            entries.append(mf.EpisodeEntry(index=ep, length=n + 1, from_index=0, to_index=n + 1, shard=0, tasks=[],
                                           members=w.add(rec)))
        w.commit()
    m = mf.Manifest(fps=10, features={}, cameras=[], tasks={}, episodes=entries,
                    shards=[mf.ShardEntry("shard.tar", w.size, w.sha256, [e.index for e in entries])])
    spans: dict[int, list[int]] = {}
    with tarfile.open(path) as tf:
        for x in tf.getmembers():  # [first header, end of last member's padded data) per record
            span = spans.setdefault(int(sh.split_member(x.name)[0]), [x.offset, 0])
            span[1] = x.offset_data + -(-x.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    assert record_spans(m.index.shard_entries(0)) == {ep: tuple(span) for ep, span in spans.items()}
    assert path.stat().st_size == w.size
