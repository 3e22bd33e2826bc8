"""Checks for a compiled roboreel dataset: the manifest, every shard read to its end, every record against the
manifest, and the LeRobot v3 view of data/ and meta/.

Shards are streamed one record at a time (whole-shard sha256 computed while the tar is parsed, in one pass), so
memory is one episode's members however large a shard is. The tar is read with ``tarfile`` directly rather than
through webdataset's iterators: a validator needs the exact member sizes and the point where a truncated tar
breaks, which webdataset's handlers turn into skipped samples.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tarfile
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.formats import manifest as mf
from roboreel.formats import shard as sh
from roboreel.formats.digest import check_rows_digest
from roboreel.formats.errors import CompiledFormatError, SourceError
from roboreel.formats.lerobot_v3 import (
    EPISODES_DIR,
    INFO_PATH,
    TASKS_PATH,
    SourceInfo,
    read_parquet,
    tasks_of,
)
from roboreel.validate._io import Root, progress_bar
from roboreel.validate.cameras import check_clip
from roboreel.validate.index import check_index_files, check_manifest
from roboreel.validate.media import CountMode, VideoProbeError, probe_video
from roboreel.validate.report import Report
from roboreel.validate.rowgroups import TIMESTAMP_TOLERANCE_S, expected_timestamps
from roboreel.validate.source import check_source

logger = logging.getLogger(__name__)

_EOA = 2 * tarfile.BLOCKSIZE  # a tar ends with two zero blocks


class _HashingReader:
    """A read-only file wrapper that hashes (optionally) and counts what passes through, keeping the tail."""

    def __init__(self, f: IO[bytes], *, hashing: bool) -> None:
        self.f, self.n, self.tail = f, 0, b""
        self.h = hashlib.sha256() if hashing else None

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        if self.h is not None:
            self.h.update(data)
        self.n += len(data)
        self.tail = (self.tail + data)[-_EOA:]
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def load(root: Root, report: Report) -> mf.Manifest | None:
    """Parse roboreel.json; report a fatal finding (unreadable, or a version this roboreel cannot read)."""
    rel = mf.MANIFEST_NAME
    try:
        with root.open(rel) as f:
            raw = json.loads(f.read())
    except (ValueError, OSError) as e:
        report.fatal("manifest-unreadable", f"not valid JSON: {e}", file=rel)
        return None
    version = raw.get("format_version") if isinstance(raw, dict) else None
    if isinstance(raw, dict) and raw.get("format") == mf.FORMAT_NAME and version not in mf.READABLE_VERSIONS:
        newer = isinstance(version, int) and version > mf.FORMAT_VERSION
        report.fatal("manifest-version", f"format_version {version!r} is {'newer than' if newer else 'not'} the "
                     f"version this roboreel reads ({mf.FORMAT_VERSION}); upgrade roboreel or recompile", file=rel)
        return None
    try:
        return mf.Manifest.from_dict(raw, file=rel, root=root.url, storage_options=root.storage_options)
    except CompiledFormatError as e:
        report.fatal("manifest-unreadable", str(e), file=rel)
        return None


def _check_rows(data: bytes, e: mf.EpisodeEntry, shard: str, report: Report, *, fast: bool, fps: int) -> None:
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        table = pf.read(use_threads=False)
    except (pa.ArrowException, OSError) as err:
        report.error("record-unreadable", f"rows parquet unreadable: {err}", file=shard, episode=e.index)
        return
    if pf.metadata.num_row_groups != 1:
        report.error("rows-rowgroups", f"{pf.metadata.num_row_groups} row groups, need exactly 1", file=shard,
                     episode=e.index)
    problems = []
    if table.num_rows != e.length:
        problems.append(f"{table.num_rows} rows, length is {e.length}")
    cols = table.column_names
    if "index" in cols and table.column("index").to_pylist() != list(range(e.from_index, e.from_index + table.num_rows)):
        problems.append(f"index is not {e.from_index}..{e.to_index - 1}")
    if "frame_index" in cols and table.column("frame_index").to_pylist() != list(range(table.num_rows)):
        problems.append("frame_index is not 0..n-1")
    if "episode_index" in cols and set(table.column("episode_index").to_pylist()) - {e.index}:
        problems.append("rows of other episodes")
    if problems:
        report.error("rows-mismatch", "; ".join(problems), file=shard, episode=e.index)
    if "timestamp" in cols and "frame_index" in cols and table.num_rows and fps > 0:
        # The reader checks each clip frame's pts (k / fps) against the row's timestamp.
        err = np.abs(table.column("timestamp").to_numpy().astype(np.float64)
                     - expected_timestamps(table.column("frame_index").to_numpy(), fps))
        k = int(np.argmax(err))
        if err[k] > TIMESTAMP_TOLERANCE_S:
            report.error("timestamp-mismatch", f"row {k} has a timestamp {err[k]:.6f}s from frame_index / fps "
                         f"(tolerance {TIMESTAMP_TOLERANCE_S}s)", file=shard, episode=e.index)
    if not fast and e.rows_sha256:
        _check_digest(table, e.rows_sha256, report, "rows hash differs from the manifest's rows_sha256",
                      file=shard, episode=e.index)


def _check_digest(table: pa.Table, recorded: str, report: Report, message: str, **where) -> None:
    """A v2 digest mismatch is an error; a v1 one (old manifests) cannot tell corruption from storage detail."""
    ok = check_rows_digest(table, recorded)
    if ok is False:
        report.error("rows-digest", message, **where)
    elif ok is None:
        report.warning("rows-digest-v1", "rows differ from the manifest's v1 rows_sha256, which also hashes "
                       "parquet schema metadata, so this may not be a change of values; recompile to record v2 "
                       "digests", **where)


def _check_record(m: mf.Manifest, e: mf.EpisodeEntry, members: dict[str, bytes], shard: str, report: Report, *,
                  fast: bool, count: CountMode) -> None:
    """One record against its manifest entry: members, json, rows, clips."""
    report.checked["records"] += 1
    expected = {x.name: x for x in e.members}
    for name in sorted(expected.keys() - members.keys()):
        report.error("member-missing", f"member {name} is not in the shard", file=shard, episode=e.index)
    for name in sorted(members.keys() - expected.keys()):
        report.warning("member-unexpected", f"member {name} is not in the manifest", file=shard, episode=e.index)
    for name in sorted(expected.keys() & members.keys()):
        data, want = members[name], expected[name]
        if len(data) != want.size:
            report.error("member-size-mismatch", f"{name} is {len(data)} bytes, manifest says {want.size}",
                         file=shard, episode=e.index)
        elif not fast and sh.sha256_hex(data) != want.sha256:
            report.error("member-checksum-mismatch", f"{name} sha256 differs from the manifest", file=shard,
                         episode=e.index)
    jname, rname = sh.json_member(e.index), sh.rows_member(e.index)
    meta: dict = {}
    if jname in members:
        try:
            meta = json.loads(members[jname])
        except ValueError as err:
            report.error("record-unreadable", f"{jname} is not JSON: {err}", file=shard, episode=e.index)
            meta = {}
        for key, want in (("length", e.length), ("episode_index", e.index), ("index", e.index), ("fps", m.fps),
                          ("dataset_from_index", e.from_index), ("dataset_to_index", e.to_index),
                          ("from_index", e.from_index), ("to_index", e.to_index)):
            if key in meta and meta[key] != want:
                report.error("record-meta-mismatch", f"{jname} says {key}={meta[key]!r}, manifest says {want}",
                             file=shard, episode=e.index)
        for cam, spec in (meta.get("cameras") or {}).items():
            if isinstance(spec, dict) and "frames" in spec and spec["frames"] != e.length:
                report.error("record-meta-mismatch", f"{jname} says camera {cam!r} has {spec['frames']} frames, "
                             f"length is {e.length}", file=shard, episode=e.index)
    if rname in members:
        _check_rows(members[rname], e, shard, report, fast=fast, fps=m.fps)
    for cam in m.cameras:
        name = sh.clip_member(e.index, cam.key)
        if name not in members:
            if name not in expected:
                report.error("clip-missing", f"no clip of camera {cam.key!r}", file=shard, episode=e.index)
            continue
        report.checked["clips"] += 1
        try:
            probe = probe_video(io.BytesIO(members[name]), mode=count)
        except VideoProbeError as err:
            report.error("clip-unreadable", f"{name}: {err}", file=shard, episode=e.index)
            continue
        if probe.frames != e.length:
            report.error("clip-frame-count", f"{name} has {probe.frames} frames, the episode has {e.length}",
                         file=shard, episode=e.index)
        elif probe.pts_s is not None:
            off = [k for k, t in enumerate(probe.pts_s) if not abs(t - k / m.fps) < TIMESTAMP_TOLERANCE_S]
            if off:
                k = off[0]
                report.error("clip-timestamp", f"{name}: {len(off)} frames are not within "
                             f"{TIMESTAMP_TOLERANCE_S:g}s of k/fps "
                             f"(frame {k} at {probe.pts_s[k]:.6f}s, not {k}/{m.fps}s): the reader refuses them",
                             file=shard, episode=e.index)
        # a camera whose clips were partly copied, partly re-encoded lists both codecs ("h264,hevc": format.md)
        if probe.codec not in cam.codec.split(",") or (probe.height, probe.width) != (cam.height, cam.width):
            report.warning("clip-codec", f"{name} is {probe.codec} {probe.height}x{probe.width}, manifest says "
                           f"{cam.codec} {cam.height}x{cam.width}", file=shard, episode=e.index)
        cams = meta.get("cameras") if isinstance(meta, dict) else None
        record = cams.get(cam.key) if isinstance(cams, dict) else None
        check_clip(probe, m.features.get(cam.key) or {}, record if isinstance(record, dict) else None, name,
                   report, file=shard, episode=e.index)


def check_shard(root: Root, m: mf.Manifest, pos: int, report: Report, *, fast: bool, count: CountMode) -> None:
    """Read one shard to its end, checking size, sha256, tar integrity and each record."""
    ix = m.index
    path, want_size, want_sha = ix.shards["path"][pos], int(ix.shards["size"][pos]), ix.shards["sha256"][pos]
    entries = {e.index: e for e in ix.shard_entries(pos)}
    order = list(entries)
    report.checked["shards"] += 1
    if not root.exists(path):
        report.error("shard-missing", "shard does not exist", file=path, episodes=order)
        return
    size = root.size(path)
    if size != want_size:
        report.error("shard-size-mismatch", f"{size} bytes, manifest says {want_size}", file=path)
    listed = set(order)
    seen: dict[int, None] = {}  # episodes in tar order
    truncated = False

    def finish(key: str, members: dict[str, bytes]) -> None:
        try:
            ep = int(key)
        except ValueError:
            report.error("record-unexpected", f"record key {key!r} is not an episode index", file=path)
            return
        if ep in seen:
            report.error("record-duplicate", "a second record of the episode (its members are not adjacent)",
                         file=path, episode=ep)
            return
        seen[ep] = None
        if ep not in listed:
            where = f"the manifest puts it in shard {m.episode(ep).shard}" if _has(m, ep) else "not in the manifest"
            report.error("record-unexpected", f"record of episode {ep}: {where}", file=path, episode=ep)
            return
        _check_record(m, entries[ep], members, path, report, fast=fast, count=count)

    with root.open(path) as f:
        reader = _HashingReader(f, hashing=not fast)
        key, members = None, {}
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tf:  # type: ignore[call-overload]
                while (info := tf.next()) is not None:
                    tf.members = []  # stream mode would keep every TarInfo otherwise
                    if not info.isfile():
                        continue
                    k, _ = sh.split_member(info.name)
                    if key is not None and k != key:
                        finish(key, members)
                        members = {}
                    key = k
                    members[info.name] = tf.extractfile(info).read()
        except (tarfile.TarError, EOFError, OSError) as err:
            truncated = True
            where = f" inside the record of {key}" if key is not None else ""
            report.error("shard-truncated", f"tar breaks after {reader.n} bytes{where}: {err}", file=path)
        else:
            if key is not None:
                finish(key, members)
            reader.drain()
            if reader.n % tarfile.BLOCKSIZE or reader.tail != bytes(_EOA):
                truncated = True
                report.error("shard-truncated", f"tar of {reader.n} bytes has no end-of-archive marker", file=path)
    if reader.h is not None and not truncated and size == want_size and reader.h.hexdigest() != want_sha:
        report.error("shard-checksum-mismatch", "sha256 differs from the manifest", file=path)
    missing = [ep for ep in order if ep not in seen]
    if missing:
        why = " (the tar is truncated)" if truncated else ""
        report.error("record-missing", f"records missing from the shard{why}", file=path, episodes=missing)
    elif [ep for ep in seen if ep in listed] != order:
        report.warning("record-order", "records are not in the manifest's order", file=path)


def _has(m: mf.Manifest, ep: int) -> bool:
    try:
        m.episode(ep)
    except KeyError:
        return False
    return True


def check_meta(root: Root, m: mf.Manifest, report: Report, *, progress: bool, fast: bool = False) -> None:
    """The LeRobot v3 view (meta/ + data/) passes the source checks and agrees with the manifest, down to the
    values of every episode's rows (hashed like the shard records, unless ``fast``)."""
    _check_meta_files(root, m, report)
    if not root.exists(INFO_PATH):
        report.warning("meta-missing", "no meta/info.json: data/ is not readable as a LeRobot dataset", file=INFO_PATH)
        return
    meta = check_source(root, report, videos=False, progress=progress, unreadable="error",
                        clip_keys=m.camera_keys)
    if meta is None or meta.episodes is None:
        return
    _check_meta_header(root, m, meta.info, report)
    ours = {e.index: e for e in meta.episodes}
    mine: set[int] = set()
    for e in m.index.iter_entries():
        mine.add(e.index)
        v = ours.get(e.index)
        if v is None:
            report.error("meta-manifest-mismatch", "in roboreel.json but not in meta/episodes", file=EPISODES_DIR,
                         episode=e.index)
        elif (v.length, v.from_index, v.to_index) != (e.length, e.from_index, e.to_index):
            report.error("meta-manifest-mismatch", f"meta/episodes says length {v.length}, {v.from_index}.."
                         f"{v.to_index}; roboreel.json says length {e.length}, {e.from_index}..{e.to_index}",
                         file=EPISODES_DIR, episode=e.index)
    extra = sorted(set(ours) - mine)
    if extra:
        report.error("meta-manifest-mismatch", "in meta/episodes but not in roboreel.json", file=EPISODES_DIR,
                     episodes=extra)
    if not fast:
        _check_data_digests(root, m, ours, report)


def _check_meta_files(root: Root, m: mf.Manifest, report: Report) -> None:
    """Each meta/ file hashes to what finalize recorded in roboreel.json (``meta_files``). The cross-checks below
    compare what both sides state; stats.json has no counterpart in roboreel.json, yet lerobot-train normalizes
    every feature with it, so an edit or a partial copy of it would change training silently."""
    for rel, want in sorted(m.meta_files.items()):
        try:
            with root.open(rel) as f:
                got = hashlib.sha256(f.read()).hexdigest()
        except FileNotFoundError:
            report.error("meta-missing", "roboreel.json records this meta/ file, but it is not there", file=rel)
            continue
        if got != want:
            report.error("meta-checksum", "sha256 differs from the one roboreel.json recorded at compile time "
                         "(edited or damaged since)", file=rel)


def _check_meta_header(root: Root, m: mf.Manifest, info: SourceInfo, report: Report) -> None:
    """meta/info.json's fps and features and meta/tasks.parquet against roboreel.json, which finalize wrote from
    the same values: LeRobot (and ``roboreel lerobot-train``'s dataset meta) reads these, the reader the manifest."""
    if info.fps != m.fps:
        report.error("meta-manifest-mismatch", f"meta/info.json says fps {info.fps}, roboreel.json {m.fps}",
                     file=INFO_PATH)
    differ = sorted(k for k in set(info.features) | set(m.features) if info.features.get(k) != m.features.get(k))
    if differ:
        report.error("meta-manifest-mismatch", f"meta/info.json and roboreel.json describe features {differ} "
                     "differently", file=INFO_PATH)
    try:
        tasks = tasks_of(read_parquet(root.fs, root.path(TASKS_PATH), TASKS_PATH))
    except SourceError:
        return  # reported by check_source (tasks-unreadable)
    if tasks != m.tasks:
        wrong = sorted(i for i in set(tasks) | set(m.tasks) if tasks.get(i) != m.tasks.get(i))
        report.error("meta-manifest-mismatch", f"meta/tasks.parquet and roboreel.json name tasks {wrong[:10]} "
                     "differently", file=TASKS_PATH)


def _check_data_digests(root: Root, m: mf.Manifest, ours: dict, report: Report) -> None:
    """Each episode's rows in data/ hash to the manifest's rows_sha256 (the source rows' hash at compile time),
    so the LeRobot view holds the source values too, not only the shard records. One data file in memory at a
    time (a compiled data file holds one shard's episodes)."""
    by_file: dict[str, list[tuple[int, str]]] = {}
    for e in m.index.iter_entries():
        if e.rows_sha256 and e.index in ours:
            by_file.setdefault(ours[e.index].data_path, []).append((e.index, e.rows_sha256))
    for rel, entries in sorted(by_file.items()):
        try:
            table = read_parquet(root.fs, root.path(rel), rel)
        except SourceError:
            continue  # scan_data reported the file
        if "episode_index" not in table.column_names:
            continue
        eps = table.column("episode_index").to_numpy()
        for ep, digest in entries:
            _check_digest(table.filter(pa.array(eps == ep)), digest, report,
                          "the episode's rows in data/ hash differently from the manifest's rows_sha256",
                          file=rel, episode=ep)


def check_compiled(root: Root, report: Report, *, world_size: int = 1, num_workers: int = 1, fast: bool = False,
                   count: CountMode = "packets", progress: bool = False) -> mf.Manifest | None:
    """Every compiled check; returns the manifest (None when it is unreadable: a fatal finding)."""
    m = load(root, report)
    if m is None or not check_index_files(root, m, report, fast=fast):
        return None
    check_manifest(m, report, world_size=world_size, num_workers=num_workers)
    if report.count("fatal"):
        return None
    listed = set(m.index.shards["path"])
    for rel in root.find(sh.SHARD_DIR, ".tar"):
        if rel not in listed:
            report.warning("shard-unexpected", "shard file not listed in the manifest", file=rel)
    for pos in progress_bar(range(m.num_shards), enabled=progress, desc="shards", unit="shard"):
        check_shard(root, m, pos, report, fast=fast, count=count)
    check_meta(root, m, report, progress=progress, fast=fast)
    return m
