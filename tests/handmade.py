"""A compiled roboreel dataset built by hand from formats/ alone (no compiler), and tools to damage one.

validate and inspect are tested against this, so their tests neither wait for nor trust roboreel.compile:
clips are HEVC (libx265, hvc1) encodes of the synth frames, shards are webdataset TarWriter tars, the manifest
is formats.manifest. ``rewrite_shard`` edits a shard's members and keeps the manifest consistent, so a test
breaks exactly one thing.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq
import webdataset as wds

from roboreel.formats import manifest as mf
from roboreel.formats import shard as sh
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.synth.content import render_frame

GOP = 10


def encode_hevc(frames: list, fps: int) -> bytes:
    """HEVC mp4 (hvc1, closed GOP of GOP frames, no B-frames), pts from 0: frame k = episode frame k."""
    h, w = frames[0].shape[:2]
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as c:
        s = c.add_stream("libx265", rate=fps)
        s.width, s.height, s.pix_fmt, s.codec_tag = w, h, "yuv420p", "hvc1"
        s.options = {"crf": "28", "preset": "ultrafast", "x265-params": f"log-level=error:keyint={GOP}:bframes=0"}
        for k, arr in enumerate(frames):
            f = av.VideoFrame.from_ndarray(arr, format="rgb24")
            f.pts, f.time_base = k, Fraction(1, fps)
            c.mux(s.encode(f))
        c.mux(s.encode())
    return buf.getvalue()


def _member_infos(members: dict[str, bytes]) -> list[mf.MemberInfo]:
    return [mf.MemberInfo(n, len(b), sh.sha256_hex(b)) for n, b in members.items()]


def hand_compile(source: Path, out: Path, *, per_shard: int = 3) -> mf.Manifest:
    """Compile ``source`` into ``out`` the way the format says, with nothing but formats/, PyAV and webdataset."""
    src = LeRobotSource(str(source))
    for d in ("meta", "data"):
        shutil.copytree(source / d, out / d)
    (out / sh.SHARD_DIR).mkdir(parents=True)
    cams = src.camera_keys
    h, w = src.info.features[cams[0]]["shape"][:2]
    groups = [src.episodes[i : i + per_shard] for i in range(0, len(src.episodes), per_shard)]
    shards, entries = [], []
    for pos, group in enumerate(groups):
        path = out / sh.shard_path(pos)
        with wds.TarWriter(str(path), mtime=0) as tw:
            for e in group:
                rows = src.episode_rows(e)
                clips = {
                    cam: encode_hevc([render_frame(e.from_index + k, e.index, c, k, h, w) for k in range(e.length)],
                                     src.fps)
                    for c, cam in enumerate(cams)
                }
                meta = {"episode_index": e.index, "length": e.length, "dataset_from_index": e.from_index,
                        "dataset_to_index": e.to_index, "tasks": list(e.tasks), "fps": src.fps,
                        "cameras": {cam: {"frames": e.length, "codec": "hevc"} for cam in cams}}
                rec = sh.EpisodeRecord(index=e.index, meta=meta, rows=rows, clips=clips)
                tw.write(rec.to_sample())
                entries.append(mf.EpisodeEntry(
                    index=e.index, length=e.length, from_index=e.from_index, to_index=e.to_index, shard=pos,
                    tasks=list(e.tasks), members=_member_infos(rec.to_members()), rows_sha256=sh.rows_digest(rows)))
        data = path.read_bytes()
        shards.append(mf.ShardEntry(sh.shard_path(pos), len(data), sh.sha256_hex(data), [e.index for e in group]))
    m = mf.Manifest(
        fps=src.fps, features=src.info.features,
        cameras=[mf.CameraSpec(key=c, codec="hevc", height=h, width=w, gop=GOP, bframes=0) for c in cams],
        tasks=src.tasks, shards=shards, episodes=entries, source={"url": str(source)},
        settings={"crf": 28, "gop": GOP}, created_by="tests/handmade.py",
    )
    mf.write_manifest(out, m)
    return m


def read_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}


def rewrite_shard(root: Path, pos: int, edit: Callable[[dict[str, bytes]], dict[str, bytes]]) -> mf.Manifest:
    """Replace shard ``pos``'s members by ``edit(members)`` and update the manifest to match the new bytes
    (shard size/sha256, member lists of its episodes), so only what ``edit`` broke is wrong."""
    m = mf.load_manifest(str(root))
    path = root / m.shards[pos].path
    members = edit(read_members(path))
    with tarfile.open(path, "w") as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    data = path.read_bytes()
    s = m.shards[pos]
    m.shards[pos] = mf.ShardEntry(s.path, len(data), sh.sha256_hex(data), s.episodes)
    for i, e in enumerate(m.episodes):
        if e.shard == pos:
            mine = {n: b for n, b in members.items() if sh.split_member(n)[0] == sh.episode_key(e.index)}
            listed = {x.name for x in e.members}
            infos = [x for x in _member_infos(mine) if x.name in listed]  # a dropped member stays dropped
            infos += [x for x in e.members if x.name not in mine]  # ... but the manifest still lists it
            m.episodes[i] = mf.EpisodeEntry(**{**e.__dict__, "members": infos})
    m.__dict__.pop("_by_index", None)
    m.__dict__.pop("_lengths", None)
    mf.write_manifest(root, m)
    return m


def edit_index(root: Path, which: str, edit: Callable[[list[dict]], None]) -> None:
    """Edit the rows of an index table in place (``which``: "shards", or "episodes" for the first episode file)
    and record the file's new size and sha256 in roboreel.json, so only what ``edit`` changed is wrong. Written
    directly with pyarrow, not through IndexWriter, so an inconsistent index can be made on purpose."""
    from roboreel.formats import index as ix
    from roboreel.formats.index_write import file_digest

    doc = json.loads((root / mf.MANIFEST_NAME).read_text())
    ref = doc["index"]["shards"] if which == "shards" else doc["index"]["episodes"][0]
    schema = ix.SHARDS_SCHEMA if which == "shards" else ix.EPISODES_SCHEMA
    rows = pq.read_table(root / ref["path"]).to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / ref["path"],
                   row_group_size=doc["index"]["row_group_rows"])
    ref.update(file_digest(str(root / ref["path"])))
    (root / mf.MANIFEST_NAME).write_text(json.dumps(doc))
