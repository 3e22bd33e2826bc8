"""Ways to break a dataset, one function per kind, each on real bytes of a copy and each saying where it broke.

Every function takes the root of a *copy* (source or compiled), damages exactly one thing and returns a
``Fault``: the dataset-relative file that is now bad and the episodes it affects, in the order a compile or
reader meets them. Tests then check that every tool names that file and one of those episodes.
"""

from __future__ import annotations

import io
import json
import random
import tarfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from roboreel.formats import manifest as mf
from roboreel.formats import shard as sh
from roboreel.formats.lerobot_v3 import EpisodeMeta, LeRobotSource

TOP = "observation.images.top"


@dataclass(frozen=True)
class Fault:
    """Where a damage is: the dataset-relative ``files`` an error may name (the damaged one first; a
    disagreement between two files may be reported at either) and the ``episodes`` it affects."""

    files: tuple[str, ...]
    episodes: tuple[int, ...]

    @property
    def file(self) -> str:
        return self.files[0]

    @property
    def episode(self) -> int:
        return self.episodes[0]


def _fault(file: str | tuple[str, ...], episodes=()) -> Fault:
    return Fault((file,) if isinstance(file, str) else tuple(file), tuple(episodes))


# -- helpers ------------------------------------------------------------------------------------------------
def _source(root: Path) -> LeRobotSource:
    return LeRobotSource(str(root))


def _hosts(src: LeRobotSource, rel: str, camera: str = TOP) -> list[EpisodeMeta]:
    return [e for e in src.episodes if e.videos[camera].path == rel]


def _shared_video(src: LeRobotSource, camera: str = TOP) -> str:
    """The first mp4 of ``camera`` that hosts several episodes (so later episodes start at from_timestamp > 0)."""
    for e in src.episodes:
        rel = e.videos[camera].path
        if len(_hosts(src, rel, camera)) > 1:
            return rel
    raise AssertionError("the source has no mp4 shared by several episodes")


def remux(path: Path, *, keep: slice = slice(None), retime: tuple[int, int] | None = None) -> None:
    """Rewrite an mp4 by stream copy: keep only packets ``keep`` (decode order) and, with ``retime=(old, new)``,
    move frame n from n/old to n/new seconds (a file whose frame rate disagrees with the metadata's). The
    pixels stay the same."""
    tmp = path.with_suffix(".remux.mp4")
    with av.open(str(path)) as src, av.open(str(tmp), "w", format="mp4") as dst:
        ist = src.streams.video[0]
        ost = dst.add_stream_from_template(ist, opaque=True)
        packets = [p for p in src.demux(ist) if p.size][keep]
        for p in packets:
            if retime is not None:
                old, new = retime
                n = round(p.pts * ist.time_base * old)
                p.pts = p.dts = round(Fraction(n, new) / ist.time_base)
            p.stream = ost
            dst.mux(p)
    tmp.replace(path)


def _rewrite_rows(path: Path, edit) -> None:
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        edit(r)
    pq.write_table(pa.Table.from_pylist(rows), path)


# -- source damage ------------------------------------------------------------------------------------------
def truncated_mp4(root: Path) -> Fault:
    """A shared mp4 cut to half its bytes (its moov index sits at the end, so it no longer opens)."""
    src = _source(root)
    rel = _shared_video(src)
    data = (root / rel).read_bytes()
    (root / rel).write_bytes(data[: len(data) // 2])
    return _fault(rel, tuple(e.index for e in _hosts(src, rel)))


def garbage_mid_mp4(root: Path, *, seed: int = 0, video: str | None = None) -> Fault:
    """Random bytes over the packets of the middle third of one episode inside a shared mp4 (or ``video``),
    size unchanged (disk or transfer corruption): the container still opens, decoding that episode fails."""
    src = _source(root)
    rel = video or _shared_video(src)
    ep = max(_hosts(src, rel), key=lambda e: e.length)
    span = ep.videos[TOP]
    data = bytearray((root / rel).read_bytes())
    with av.open(str(root / rel)) as c:
        s = c.streams.video[0]
        fps = src.fps
        first = round(span.from_timestamp * fps)
        lo, hi = first + ep.length // 3, first + 2 * ep.length // 3
        packets = [(p.pos, p.size) for p in c.demux(s) if p.size and lo <= round(float(p.pts * s.time_base) * fps) < hi]
    rng = random.Random(seed)
    for pos, size in packets:
        data[pos : pos + size] = bytes(rng.randrange(256) for _ in range(size))
    (root / rel).write_bytes(bytes(data))
    return _fault(rel, (ep.index,))


def video_shorter_than_span(root: Path, *, drop: int = 3) -> Fault:
    """A shared mp4 without its last ``drop`` frames: the last episode it hosts runs past its end."""
    src = _source(root)
    rel = _shared_video(src)
    remux(root / rel, keep=slice(None, -drop))
    return _fault(rel, (_hosts(src, rel)[-1].index,))


def video_fps_mismatch(root: Path, *, fps: int = 16) -> Fault:
    """A shared mp4 re-timed to ``fps`` frames per second while info.json (and the spans) say another rate."""
    src = _source(root)
    assert src.fps != fps
    rel = _shared_video(src)
    remux(root / rel, retime=(src.fps, fps))
    return _fault(rel, tuple(e.index for e in _hosts(src, rel)))


def info_fps_mismatch(root: Path) -> Fault:
    """info.json says another fps than the one the videos, timestamps and spans were made with: every episode
    is affected; the first video span checked is the one named first."""
    src = _source(root)
    files = [e.videos[cam].path for e in src.episodes for cam in src.camera_keys] + [e.data_path for e in src.episodes]
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info["fps"] = info["fps"] * 2
    path.write_text(json.dumps(info, indent=4))
    return _fault((*dict.fromkeys(files), "meta/info.json"), tuple(e.index for e in src.episodes))


def missing_video(root: Path) -> Fault:
    src = _source(root)
    rel = _shared_video(src)
    (root / rel).unlink()
    return _fault(rel, tuple(e.index for e in _hosts(src, rel)))


def missing_data_parquet(root: Path) -> Fault:
    src = _source(root)
    rel = src.episodes[-1].data_path
    (root / rel).unlink()
    return _fault(rel, tuple(e.index for e in src.episodes if e.data_path == rel))


def parquet_missing_column(root: Path, column: str = "action") -> Fault:
    src = _source(root)
    rel = src.episodes[-1].data_path
    table = pq.read_table(root / rel)
    with pq.ParquetWriter(root / rel, table.drop([column]).schema) as w:
        eps = table.column("episode_index").to_pylist()
        for ep in dict.fromkeys(eps):  # keep one row group per episode: only the column is wrong
            w.write_table(table.drop([column]).filter(pc.equal(table.column("episode_index"), ep)))
    return _fault(rel, tuple(e.index for e in src.episodes if e.data_path == rel))


def meta_range_gap(root: Path, episode: int = 3, shift: int = 5) -> Fault:
    """meta/episodes moves one episode's dataset_from/to_index (length kept): a gap and an overlap."""
    [path] = sorted(root.glob("meta/episodes/**/*.parquet"))
    data = _source(root).episode(episode).data_path

    def edit(r: dict) -> None:
        if r["episode_index"] == episode:
            r["dataset_from_index"] += shift
            r["dataset_to_index"] += shift

    _rewrite_rows(path, edit)
    return _fault((str(path.relative_to(root)), "meta/episodes", data), (episode,))


def meta_range_shifted(root: Path, shift: int = 5) -> Fault:
    """meta/episodes is self-consistent (contiguous, lengths right) but every range is off from the data's
    ``index`` column: only reading the rows can tell."""
    [path] = sorted(root.glob("meta/episodes/**/*.parquet"))

    def edit(r: dict) -> None:
        r["dataset_from_index"] += shift
        r["dataset_to_index"] += shift

    _rewrite_rows(path, edit)
    src = _source(root)
    data = tuple(dict.fromkeys(e.data_path for e in src.episodes))
    return _fault((*data, str(path.relative_to(root))), tuple(e.index for e in src.episodes))


def timestamp_off(root: Path, *, episode: int = 4, frame: int = 5, by_s: float = 1e-3) -> Fault:
    """One row's timestamp moved ``by_s`` away from frame_index / fps (one row group per episode kept): the
    frame LeRobot looks up at from_timestamp + timestamp is no longer within 1e-4 s of it."""
    src = _source(root)
    ep = src.episode(episode)
    path = root / ep.data_path
    table = pq.read_table(path)
    ts = table.column("timestamp").to_numpy().copy()
    row = [i for i, (e, f) in enumerate(zip(table.column("episode_index").to_pylist(),
                                            table.column("frame_index").to_pylist(), strict=True))
           if (e, f) == (episode, frame)]
    ts[row] += by_s
    table = table.set_column(table.column_names.index("timestamp"), "timestamp", pa.array(ts, pa.float32()))
    eps = table.column("episode_index").to_pylist()
    with pq.ParquetWriter(path, table.schema) as w:
        for e in dict.fromkeys(eps):
            w.write_table(table.filter(pc.equal(table.column("episode_index"), e)))
    return _fault((ep.data_path, *(v.path for v in ep.videos.values())), (episode,))


def episode_split_rowgroups(root: Path) -> Fault:
    """The first episode's rows written as two row groups (legal parquet, not one row group per episode)."""
    src = _source(root)
    ep = src.episodes[0]
    path = root / ep.data_path
    table = pq.read_table(path)
    eps = table.column("episode_index").to_pylist()
    with pq.ParquetWriter(path, table.schema) as w:
        for e in dict.fromkeys(eps):
            rows = table.filter(pc.equal(table.column("episode_index"), e))
            if e == ep.index:
                w.write_table(rows.slice(0, 5))
                w.write_table(rows.slice(5))
            else:
                w.write_table(rows)
    return _fault(ep.data_path, (ep.index,))


def several_episodes_per_rowgroup(root: Path) -> Fault:
    """Every data file as a single row group (LeRobot's layout before its PR #3807)."""
    src = _source(root)
    files = list(dict.fromkeys(e.data_path for e in src.episodes))
    for rel in files:
        table = pq.read_table(root / rel)
        pq.write_table(table, root / rel, row_group_size=table.num_rows)
    return _fault(files[0], tuple(e.index for e in src.episodes if e.data_path == files[0]))


def unsupported_version(root: Path, version: str = "v2.1") -> Fault:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info["codebase_version"] = version
    path.write_text(json.dumps(info, indent=4))
    return _fault("meta/info.json", ())


def info_not_json(root: Path) -> Fault:
    path = root / "meta/info.json"
    path.write_text(path.read_text()[:200])  # cut mid-object, like an interrupted upload
    return _fault("meta/info.json", ())


# -- compiled damage ----------------------------------------------------------------------------------------
def _tar_members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tf:
        return tf.getmembers()


def truncated_shard(root: Path, pos: int = 1) -> Fault:
    """Shard ``pos`` cut inside its second record's clip: the first record is whole, the rest is gone."""
    m = mf.load_manifest(str(root))
    s = m.shards[pos]
    path = root / s.path
    second = [x for x in _tar_members(path) if x.name.startswith(sh.episode_key(s.episodes[1]))]
    clip = next(x for x in second if x.name.endswith(sh.CLIP_SUFFIX))
    path.write_bytes(path.read_bytes()[: clip.offset_data + clip.size // 2])
    return _fault(s.path, tuple(s.episodes[1:]))


def missing_shard(root: Path, pos: int = 2) -> Fault:
    m = mf.load_manifest(str(root))
    s = m.shards[pos]
    (root / s.path).unlink()
    return _fault(s.path, tuple(s.episodes))


def tar_member_missing(root: Path, pos: int = 0) -> Fault:
    """Shard ``pos`` rewritten without one clip of its second episode; the manifest still lists the member."""
    m = mf.load_manifest(str(root))
    s = m.shards[pos]
    ep = s.episodes[1]
    drop = sh.clip_member(ep, m.cameras[0].key)
    path = root / s.path
    with tarfile.open(path) as tf:
        members = [(x, tf.extractfile(x).read()) for x in tf.getmembers()]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for info, data in members:
            if info.name != drop:
                tf.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    if len(data) <= s.size:
        # Padding to a whole 10 KiB tar record can hide a small missing member in the shard's size; another
        # writer's trailing zeros (valid after the end-of-archive blocks) make the size differ, as it would.
        data += bytes(s.size - len(data) + tarfile.RECORDSIZE)
    path.write_bytes(data)
    return _fault(s.path, (ep,))


def shard_bytes_flipped(root: Path, pos: int = 1) -> Fault:
    """One byte inside a clip member of shard ``pos`` flipped (bit rot at rest): sizes unchanged, checksums not."""
    m = mf.load_manifest(str(root))
    s = m.shards[pos]
    path = root / s.path
    ep = s.episodes[-1]
    clip = next(x for x in _tar_members(path) if x.name == sh.clip_member(ep, m.cameras[-1].key))
    data = bytearray(path.read_bytes())
    data[clip.offset_data + clip.size // 2] ^= 0x5A
    path.write_bytes(bytes(data))
    return _fault(s.path, (ep,))


def manifest_newer_version(root: Path) -> Fault:
    path = root / mf.MANIFEST_NAME
    doc = json.loads(path.read_text())
    doc["format_version"] = mf.FORMAT_VERSION + 1
    path.write_text(json.dumps(doc))
    return _fault(mf.MANIFEST_NAME, ())


def manifest_not_json(root: Path) -> Fault:
    path = root / mf.MANIFEST_NAME
    path.write_bytes(path.read_bytes()[:100])
    return _fault(mf.MANIFEST_NAME, ())
