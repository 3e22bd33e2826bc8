"""``roboreel inspect``: what a dataset holds, for humans (episodes, frames, cameras, codec, GOP, shards, sizes).

Reads metadata and file listings only (plus parquet footers for row-group counts), never media bytes, so it is
quick on remote datasets. It trusts the metadata; ``validate`` is what checks it.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.manifest import MANIFEST_NAME, load_manifest, transform_summary, unfinished_compile
from roboreel.formats.table_features import image_keys
from roboreel.validate._io import Root


def _lengths(lengths: list[int]) -> dict[str, float]:
    if not lengths:
        return {"min": 0, "mean": 0.0, "max": 0}
    return {"min": min(lengths), "mean": round(sum(lengths) / len(lengths), 2), "max": max(lengths)}


def _data_summary(root: Root, episodes: int) -> dict[str, Any]:
    """Data parquet files: count, bytes, row groups (from footers), whether each holds one episode per group."""
    files = root.find("data", ".parquet")
    row_groups = 0
    for rel in files:
        with root.open(rel) as f:
            row_groups += pq.ParquetFile(f).metadata.num_row_groups
    return {"files": len(files), "bytes": sum(files.values()), "row_groups": row_groups,
            "one_row_group_per_episode": row_groups == episodes}


def _images(features: dict[str, Any]) -> list[dict[str, Any]]:
    """Image features (images in parquet, kept encoded in the rows): key and declared shape."""
    return [{"key": k, "shape": features[k].get("shape")} for k in image_keys(features)]


def _source_summary(root: Root) -> dict[str, Any]:
    src = v3.LeRobotSource(root.url)
    info, episodes = src.info, src.episodes
    lengths = [e.length for e in episodes]
    mp4s = root.find("videos", ".mp4")
    cameras = []
    for cam in info.camera_keys:
        vi = info.features[cam].get("info") or {}
        paths = {e.videos[cam].path for e in episodes if cam in e.videos}
        h, w = vi.get("video.height"), vi.get("video.width")
        cameras.append({
            "key": cam, "codec": vi.get("video.codec"), "height": h, "width": w, "pix_fmt": vi.get("video.pix_fmt"),
            "gop": vi.get("video.g"), "crf": vi.get("video.crf"),
            "files": len(paths), "bytes": sum(mp4s.get(p, 0) for p in paths),
        })
    return {
        "kind": "source", "path": root.url, "codebase_version": info.raw.get("codebase_version"),
        "robot_type": info.raw.get("robot_type"), "fps": info.fps, "episodes": len(episodes),
        "frames": sum(lengths), "duration_s": round(sum(lengths) / info.fps, 3), "episode_length": _lengths(lengths),
        "tasks": len(src.tasks), "cameras": cameras, "images": _images(info.features),
        "data": _data_summary(root, len(episodes)),
        "features": {k: {"dtype": f.get("dtype"), "shape": f.get("shape")} for k, f in info.features.items()
                     if k in info.tabular_keys},
    }


def _compiled_summary(root: Root) -> dict[str, Any]:
    m = load_manifest(root.url, storage_options=root.storage_options)
    ix = m.index  # streamed a row group at a time: bounded memory at any episode count
    lengths = [int(n) for n in ix.lengths.array]
    clip_bytes: dict[str, int] = defaultdict(int)
    rows_bytes = 0
    for _, t in ix.group_tables():  # column-wise: member bytes by kind, no object per member
        flat = pc.list_flatten(t.column("members").combine_chunks())
        sizes = flat.field("size")
        ext = pc.list_element(pc.split_pattern(flat.field("name"), ".", max_splits=1), 1)  # split_member's rule
        rows_bytes += pc.sum(pc.filter(sizes, pc.equal(ext, "parquet"))).as_py() or 0
        for cam in m.camera_keys:
            clip_bytes[cam] += pc.sum(pc.filter(sizes, pc.equal(ext, f"{cam}.mp4"))).as_py() or 0
    sizes = [int(x) for x in ix.shards["size"]]
    per_shard = [int(x) for x in ix.shards["episodes"]]
    out: dict[str, Any] = {
        "kind": "compiled", "path": root.url, "format_version": m.format_version, "created_by": m.created_by,
        "fps": m.fps, "episodes": len(lengths), "frames": sum(lengths),
        "duration_s": round(sum(lengths) / m.fps, 3), "episode_length": _lengths(lengths), "tasks": len(m.tasks),
        "cameras": [{"key": c.key, "codec": c.codec, "height": c.height, "width": c.width, "pix_fmt": c.pix_fmt,
                     "gop": c.gop, "bframes": c.bframes, "bytes": clip_bytes.get(c.key, 0),
                     **({"image": True} if (m.features.get(c.key) or {}).get("dtype") == "image" else {})}
                    for c in m.cameras],
        "shards": {"count": len(sizes), "bytes": sum(sizes), "min_bytes": min(sizes, default=0),
                   "max_bytes": max(sizes, default=0), "episodes_min": min(per_shard, default=0),
                   "episodes_max": max(per_shard, default=0)},
        "images": _images({k: f for k, f in m.features.items() if k not in m.camera_keys}), "rows_bytes": rows_bytes, "source": m.source, "settings": m.settings,
    }
    if root.exists(v3.INFO_PATH):
        out["data"] = _data_summary(root, len(lengths))
    return out


def summarize(path: str, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-able summary of the dataset at ``path``; raises SourceError/CompiledFormatError when unreadable."""
    root = Root.open_url(str(path), storage_options=storage_options)
    if not root.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if root.exists(MANIFEST_NAME):
        return _compiled_summary(root)
    unfinished_compile(root.exists, root.isdir, str(path))
    if root.exists(v3.INFO_PATH):
        return _source_summary(root)
    raise v3.SourceError(f"neither {v3.INFO_PATH} nor {MANIFEST_NAME} found: not a dataset", file=str(path))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _camera_line(c: dict[str, Any]) -> str:
    size = f"{c.get('height')}x{c.get('width')}" if c.get("height") else "size ?"
    gop = f"GOP {c['gop']}" if c.get("gop") else "GOP ?"
    parts = [f"{c.get('codec') or '?'} {size} {c.get('pix_fmt') or ''}".rstrip(), gop]
    if c.get("bframes") is not None:
        parts.append(f"{c['bframes']} B-frames" if c["bframes"] else "no B-frames")
    if c.get("crf") is not None:
        parts.append(f"crf {c['crf']}")
    where = f"{c['files']} mp4, " if "files" in c else ""
    kind = "image feature as clips: " if c.get("image") else ""  # compile --images clips
    return f"{c['key']}: {kind}{', '.join(parts)} ({where}{_size(c.get('bytes', 0))})"


def format_summary(s: dict[str, Any]) -> str:
    """The summary as aligned text lines."""
    el = s["episode_length"]
    head = (f"LeRobot {s['codebase_version']} source" if s["kind"] == "source"
            else f"roboreel compiled dataset (format {s['format_version']})")
    rows = [
        ("episodes", f"{s['episodes']} ({el['min']}-{el['max']} frames, mean {el['mean']})"),
        ("frames", f"{s['frames']} at {s['fps']} fps ({datetime.timedelta(seconds=round(s['duration_s']))})"),
        ("tasks", str(s["tasks"])),
    ]
    for i, c in enumerate(s["cameras"]):
        rows.append(("cameras" if i == 0 else "", _camera_line(c)))
    for i, im in enumerate(s.get("images", ())):
        shape = "x".join(str(n) for n in im["shape"] or ())
        rows.append(("images" if i == 0 else "", f"{im['key']}: {shape}, encoded images in the data rows"))
    if "shards" in s:
        sh = s["shards"]
        rows.append(("shards", f"{sh['count']}, {_size(sh['bytes'])} (min {_size(sh['min_bytes'])}, max "
                               f"{_size(sh['max_bytes'])}), {sh['episodes_min']}-{sh['episodes_max']} episodes each"))
    if "data" in s:
        d = s["data"]
        per = "one per episode" if d["one_row_group_per_episode"] else "NOT one per episode: run roboreel validate"
        rows.append(("data", f"{d['files']} parquet, {_size(d['bytes'])}, {d['row_groups']} row groups ({per})"))
    if s.get("source"):
        rows.append(("source", ", ".join(f"{k}={len(v)} checksummed" if k == "files" and isinstance(v, dict)
                                         else f"{k}={v}" for k, v in s["source"].items())))
    if s.get("settings"):
        transform = transform_summary(s["settings"])
        if transform:
            rows.append(("transform", transform))
        rows.append(("settings", ", ".join(f"{k}={v}" for k, v in s["settings"].items() if k != "transform")))
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"{head} at {s['path']}"] + [f"  {k:<{width}}  {v}" for k, v in rows]) + "\n"
