"""Finalize a compile: once every shard exists, rewrite LeRobot v3 meta/ and write ``roboreel.json`` last.

Reads only OUT (the record, the per-shard sidecars and the source meta snapshot), so it can run as its own job
after a SLURM array. Idempotent: running it again rewrites the same bytes.

meta/ describes the compiled dataset as LeRobot v3: data/ files are the shards' parquet files; each episode's
clip of camera ``cam`` is described as its own video file (chunk = episode // chunks_size, file = episode %
chunks_size, from_timestamp 0, to_timestamp length/fps): unpacking the tar member ``<key>.<cam>.mp4`` to that
video_path yields a plain LeRobot dataset. A ``roboreel/shard`` column says which shard holds the episode.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from roboreel._version import __version__
from roboreel.compile.out import (
    atomic_write,
    entry_from_dict,
    generation,
    out_lock,
    read_record,
    remove_stale_temps,
    remove_unused,
    shard_done,
    snapshot_source,
)
from roboreel.compile.out.paths import (
    DATA_PATH_TEMPLATE,
    FINALIZE_LOCK,
    MANIFEST,
    META_EPISODES,
    META_INFO,
    META_STATS,
    META_TASKS,
    RECORD,
    SNAPSHOT_DIR,
    UPDATE_STATE,
    VIDEO_PATH_TEMPLATE,
    index_dir,
)
from roboreel.compile.settings import CompileSettings
from roboreel.compile.source import camera_hw, frame_step, kept_length
from roboreel.compile.tables import dataset_stats, episode_columns
from roboreel.compile.video import RGB8_CLIP_FORMATS, clip_keys, transform_record
from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.depth import DEPTH_CHANNELS, is_depth
from roboreel.formats.errors import CompiledFormatError, RoboreelError
from roboreel.formats.index import FileIndex
from roboreel.formats.index_write import IndexWriter
from roboreel.formats.lerobot_v3 import read_parquet
from roboreel.formats.manifest import CameraSpec, Manifest, write_manifest
from roboreel.formats.shard import table_to_parquet_bytes
from roboreel.formats.table_features import IMAGE_DTYPE

SHARD_COLUMN = "roboreel/shard"


def _ranges(ids: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    out, start = [], None
    for i, x in enumerate(ids):
        if start is None:
            start = x
        if i + 1 == len(ids) or ids[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


class _Cameras:
    """Per-camera facts gathered shard by shard (sizes, codecs, GOP, B-frames), then one CameraSpec each."""

    def __init__(self, cams: list[str]) -> None:
        self.cams = cams
        self.seen: dict[str, dict[str, set]] = {c: {"size": set(), "codec": set(), "gop": set(), "bframes": set(),
                                                    "pix_fmt": set()}
                                                for c in cams}
        self.stats: dict[int, dict[str, Any]] = {}  # episode -> its stats, when the compile transformed (tables/_stats.py)
        self.tars: list[str] = []  # the shard tars, in shard order

    def add(self, side: dict[str, Any]) -> None:
        self.stats.update({int(ep): st for ep, st in (side.get("stats") or {}).items()})
        for clips in side["clips"].values():
            for cam in self.cams:
                i, seen = clips[cam], self.seen[cam]
                seen["size"].add((i["height"], i["width"]))
                seen["codec"].add(i["codec"])
                seen["gop"].add(i["gop"])
                seen["bframes"].add(i["bframes"])
                seen["pix_fmt"].add(i.get("pix_fmt", "yuv420p"))  # clips made before it was recorded: yuv420p

    def specs(self) -> list[CameraSpec]:
        specs = []
        for cam in self.cams:
            seen = self.seen[cam]
            if len(seen["size"]) != 1:
                raise CompiledFormatError(f"camera {cam!r} clips have several sizes {sorted(seen['size'])}")
            # an image feature's clips may differ in chroma format by episode (video/_imageclips.py's ladder): all 8-bit RGB
            if len(seen["pix_fmt"]) != 1 and not seen["pix_fmt"] <= RGB8_CLIP_FORMATS:
                raise CompiledFormatError(f"camera {cam!r} clips have several pixel formats {sorted(seen['pix_fmt'])}")
            (h, w), gops, bfs = next(iter(seen["size"])), seen["gop"], seen["bframes"]
            specs.append(CameraSpec(
                key=cam, codec=",".join(sorted(seen["codec"])), height=h, width=w, pix_fmt=",".join(sorted(seen["pix_fmt"])),
                gop=next(iter(gops)) if len(gops) == 1 else None, bframes=next(iter(bfs)) if len(bfs) == 1 else None,
            ))
        return specs


def write_shard_index(out: str, record: dict[str, Any], cams: list[str]) -> tuple[dict[str, Any], _Cameras,
                                                                              np.ndarray, np.ndarray]:
    """One pass over the shards' sidecars, in shard order: the columnar index (index.py) written as it goes,
    camera facts gathered. Memory holds one sidecar and two int arrays (episode -> shard), not every entry.
    Returns the index descriptor, the camera facts, and the episode ids with their shards. Raises
    CompiledFormatError listing the shards not (completely) compiled yet."""
    planned, gen = record["shards"], generation(record)
    writer, acc = IndexWriter(out, index_dir(gen)), _Cameras(cams)
    missing: list[int] = []
    ids: list[int] = []
    shard_of: list[int] = []
    try:
        for i, plan in enumerate(planned):
            side = shard_done(out, i, gen)
            if side is None:
                missing.append(i)
                continue
            if missing:
                continue  # only listing what is missing now
            if side["episodes"] != plan:
                raise CompiledFormatError(f"shard {i} holds episodes {side['episodes']}, the plan says {plan}",
                                          file=os.path.join(out, side["tar"]["path"]))
            acc.add(side)
            acc.tars.append(side["tar"]["path"])
            entries = sorted((entry_from_dict(e) for e in side["entries"]), key=lambda e: e.index)
            writer.add_shard(side["tar"]["path"], side["tar"]["size"], side["tar"]["sha256"], entries)
            ids.extend(e.index for e in entries)
            shard_of.extend([i] * len(entries))
        if missing:
            raise CompiledFormatError(
                f"{len(missing)} of {len(planned)} shards are not compiled yet (shards {_ranges(missing)}); run the "
                "missing --part jobs or rerun compile on this OUT, then finalize",
                file=out,
            )
        descriptor = writer.close()
    except BaseException:
        writer.abort()
        raise
    return descriptor, acc, np.asarray(ids, dtype=np.int64), np.asarray(shard_of, dtype=np.int64)


def compiled_features(features: dict[str, Any], specs: list[CameraSpec], settings: CompileSettings,
                      fps: int) -> dict:
    """The source feature dict with camera entries describing the compiled clips (``fps``: their rate)."""
    feats = copy.deepcopy(features)
    for spec in specs:
        f = feats[spec.key]
        if f.get("dtype") == IMAGE_DTYPE:  # stays LeRobot's image feature; roboreel.json's cameras say it is a clip
            continue
        h0, w0 = camera_hw(f)
        shape = list(f.get("shape") or [h0, w0, 3])
        if len(shape) == 3:
            chw = (f.get("names") or [None])[0] == "channels" or (shape[0] in (1, 3) and shape[2] not in (1, 3))
            shape = [shape[0], spec.height, spec.width] if chw else [spec.height, spec.width, shape[2]]
        f["shape"] = shape
        info = dict(f.get("info") or {})
        info.update({"video.height": spec.height, "video.width": spec.width, "video.codec": spec.codec,
                     "video.pix_fmt": spec.pix_fmt})
        if "video.channels" in info or is_depth(f):
            info["video.channels"] = DEPTH_CHANNELS if is_depth(f) else 3
        if "video.fps" in info:
            info["video.fps"] = fps
        if spec.gop is not None:  # re-encoded (stream-copied clips keep the source's encoder settings)
            # LeRobot's encoder keys (lerobot/configs/video.py, VIDEO_ENCODER_INFO_KEYS) describe x265's encode
            # now, not the source encoder's (SVT-AV1's preset 12 and its options read as an x265 config otherwise)
            info.update({"video.g": spec.gop, "video.bframes": spec.bframes, "video.preset": settings.preset})
            for key, value in (("video.fast_decode", 0), ("video.video_backend", "pyav")):
                if key in info:
                    info[key] = value
            if is_depth(f):  # lossless: no CRF; LeRobot's own depth writer records these options
                info.update({"video.crf": None, "video.extra_options": {"x265-params": "lossless=1"}})
            else:  # the nominal settings: a clip under the fidelity floor is encoded again at a lower CRF
                info.update({"video.crf": settings.crf, "video.extra_options": {
                    "x265-params": settings.x265_params(height=spec.height, width=spec.width)}})
        f["info"] = info
    return feats


def _episodes_table(snapshot, record: dict, placed: tuple[np.ndarray, np.ndarray], cams: list[str],
                    fps: int, step: int = 1, stats: dict[int, dict[str, Any]] | None = None,
                    keep: frozenset[str] = frozenset()) -> pa.Table:
    """meta/episodes for the compiled layout, ``placed``: the episode ids and the shard of each; with ``step`` > 1 lengths and indices on the new grid
    (source/_resample.py), with ``stats`` its ``stats/`` columns replaced by the recomputed ones (tables/_stats.py), except
    those of the features in ``keep`` that the source has."""
    ids, shard_of = placed
    tables = [read_parquet(snapshot.fs, snapshot.path(rel), rel) for rel in snapshot.episode_files()]
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    table = table.take(pc.sort_indices(table, [("episode_index", "ascending")]))
    cs = int(record["chunks_size"])
    eps = table.column("episode_index").to_pylist()
    lengths = [kept_length(n, step) for n in table.column("length").to_pylist()]
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64).tolist()
    shard = [int(x) for x in shard_of[np.searchsorted(ids, eps)]] if len(ids) else []
    cols: dict[str, list] = {
        "data/chunk_index": [s // cs for s in shard], "data/file_index": [s % cs for s in shard],
        "meta/episodes/chunk_index": [0] * len(eps), "meta/episodes/file_index": [0] * len(eps),
    }
    if step > 1:
        cols |= {"length": lengths, "dataset_from_index": starts[:-1], "dataset_to_index": starts[1:]}
    if stats is not None:
        kept = keep & {_stats_feature(n) for n in table.column_names if n.startswith("stats/")}
        table = table.drop_columns([n for n in table.column_names
                                    if n.startswith("stats/") and _stats_feature(n) not in kept])
        stats = {ep: {k: v for k, v in st.items() if k not in kept} for ep, st in stats.items()}
        for name, values in episode_columns(eps, stats).items():
            table = table.append_column(name, pa.array(values))
    for cam in cams:
        cols[f"videos/{cam}/chunk_index"] = [e // cs for e in eps]
        cols[f"videos/{cam}/file_index"] = [e % cs for e in eps]
        cols[f"videos/{cam}/from_timestamp"] = [0.0] * len(eps)
        cols[f"videos/{cam}/to_timestamp"] = [n / fps for n in lengths]
    for name, values in cols.items():
        if name in table.column_names:
            i = table.column_names.index(name)
            table = table.set_column(i, name, pa.array(values, type=table.schema.field(name).type))
        else:
            table = table.append_column(name, pa.array(values, type=pa.int64()))
    return table.append_column(SHARD_COLUMN, pa.array(shard, type=pa.int64()))


def _stats_feature(column: str) -> str:
    """The feature of a meta/episodes ``stats/<feature>/<stat>`` column (a feature name may hold slashes)."""
    return column[len("stats/"):].rsplit("/", 1)[0]


# What a full, read-only or refusing filesystem raises while OUT is written
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})


def finalize(out: str) -> Manifest:
    """Write meta/ and the manifest of a compile whose shards all exist (see module doc).

    One finalize at a time (out/_locks.py): the ``--part`` jobs that finish last together all finalize, and each
    removes the temps a killed finalize left, which would include the other's unfinished writes. Whoever waits
    then rewrites the same bytes."""
    out = os.fspath(out)
    if read_record(out) is None:
        raise CompiledFormatError("no compile record: not a roboreel compile output", file=out)
    with out_lock(out, FINALIZE_LOCK, "finalizes"):
        try:
            return _finalize(out, read_record(out))
        except OSError as e:
            if e.errno not in WRITE_ERRNOS:
                raise
            # every write here is a temp + rename, so what stands in OUT is whole: the shards, and the index and
            # meta/ files written before the failure; a rerun rewrites the rest
            raise RoboreelError(f"finalize stopped by {type(e).__name__}: {e} (while writing the index, meta/ and "
                                f"{MANIFEST}; the shards stay in {out}: rerun the same command to finish)") from e


def _remove_killed_temps(out: str, gen: int) -> None:
    """The temp files of writes a kill interrupted: every shard is done, so nothing writes them any more."""
    for rel in (META_INFO, META_TASKS, META_STATS, META_EPISODES, MANIFEST, RECORD, UPDATE_STATE):
        # left by a finalize that was killed, or by a run killed while it wrote the record or an update's state
        remove_stale_temps(os.path.join(out, rel))
    # temps under the index (a killed finalize) and the source meta snapshot (a run killed while it copied it)
    for top in (index_dir(gen), SNAPSHOT_DIR):
        for d, _, names in os.walk(os.path.join(out, top)):
            for name in names:
                if name.startswith(".") and name.endswith(".tmp"):
                    os.unlink(os.path.join(d, name))


def _put_stats(put: Callable[[str, bytes], None], out: str, snap: Any, settings: CompileSettings,
               cams: list[str], camera_stats: Any, step: int) -> frozenset[str]:
    """Write meta/stats.json; returns the tabular features whose stats stay the source's.

    --resize alone keeps every row as it is: the stats of the tabular features stay the source's (which need
    not be what the recorder computed: lerobot-edit-dataset's recompute_stats --relative_action rewrites the
    action's); the cameras' are recomputed from the frames written. --fps keeps other rows: all recomputed."""
    info = snap.info
    keep: frozenset[str] = frozenset()
    if settings.transforms:  # what was kept differs from the source: stats of the compiled frames and rows
        src_stats = snap.stats or {}
        if step == 1:
            keep = frozenset(k for k in src_stats if k in info.features and k not in cams)
        stats = {**dataset_stats(camera_stats, info.features), **{k: src_stats[k] for k in keep}}
        put(META_STATS, (json.dumps(dict(sorted(stats.items())), indent=4) + "\n").encode())
    elif snap.exists(v3.STATS_PATH):
        with snap.open(v3.STATS_PATH) as f:
            put(META_STATS, f.read())
    else:  # a source that has none (any more): the stats of an earlier compile of OUT must not stay
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(out, META_STATS))
    return keep


def _finalize(out: str, record: dict[str, Any]) -> Manifest:
    settings = CompileSettings.from_dict(record["settings"])
    snap = snapshot_source(out)
    info = snap.info
    cams = clip_keys(info.features, settings)  # video features, and image features made clips
    _remove_killed_temps(out, generation(record))
    descriptor, cameras, ids, shard_of = write_shard_index(out, record, cams)
    specs = cameras.specs()
    step = frame_step(info.fps, settings.fps)
    fps = info.fps // step
    features = compiled_features(info.features, specs, settings, fps)
    tasks = snap.tasks
    new_info = {
        **info.raw,
        "total_episodes": int(descriptor["episodes_total"]),
        "total_frames": int(descriptor["frames_total"]),
        "total_tasks": len(tasks),
        "fps": fps,
        "chunks_size": int(record["chunks_size"]),
        "data_path": DATA_PATH_TEMPLATE,
        "video_path": VIDEO_PATH_TEMPLATE if cams else None,
        "features": features,
    }
    meta_files: dict[str, str] = {}  # what roboreel.json records of meta/ (validate and the reader check it)

    def put(rel: str, data: bytes) -> None:
        atomic_write(os.path.join(out, rel), data)
        meta_files[rel] = hashlib.sha256(data).hexdigest()

    put(META_INFO, (json.dumps(new_info, indent=4) + "\n").encode())
    with snap.open(v3.TASKS_PATH) as f:
        put(META_TASKS, f.read())
    keep = _put_stats(put, out, snap, settings, cams, cameras.stats, step)
    episodes = _episodes_table(snap, record, (ids, shard_of), info.camera_keys, fps, step,
                               cameras.stats if settings.transforms else None, keep)
    put(META_EPISODES, table_to_parquet_bytes(episodes))

    manifest = Manifest(
        fps=fps,
        features=features,
        cameras=specs,
        tasks=tasks,
        source={**record["source"], "codebase_version": info.raw.get("codebase_version"),
                "generation": generation(record)},  # + 1 per update (out/_update.py): a reader names the change
        settings={**settings.to_dict(), **transform_record(settings, info, specs, {c: camera_hw(info.features[c]) for c in cams}), "container": "mp4", "x265_params": {
            c.key: settings.x265_params(height=c.height, width=c.width) for c in specs if c.gop is not None}},
        created_by=f"roboreel {__version__}",
        index_files=descriptor,
        index=FileIndex(out, descriptor),
        meta_files=meta_files,
    )
    write_manifest(out, manifest)  # the publication: one rename (formats/atomic.py)
    remove_unused(out, keep=set(cameras.tars) | {descriptor["shards"]["path"]} | {r["path"] for r in
                  descriptor["episodes"]}, shards=len(record["shards"]), chunks_size=int(record["chunks_size"]))
    return manifest
