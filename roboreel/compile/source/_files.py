"""Content checksums of a source's data and video files, so a resume never mixes two versions of a file.

The source fingerprint (meta/ bytes plus every file's name and size) misses a file edited in place at the same
size; a compile resumed against it would pack old and new bytes into one OUT. Local files are hashed whole
(sha256, a thread pool: hashlib releases the GIL, so hashing runs at disk speed); for remote files the store's
own content hash is used when it has one (the Hugging Face Hub's LFS sha256, an S3 ETag), so a remote compile
does not read the dataset twice; else its modification time (HTTP ``Last-Modified``, what a plain static server
such as ``python -m http.server`` sends: size and time, as make and rsync compare files). A file with none of
these is compared by size only, which the record keeps, and compile says so once.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.shard import file_sha256
from roboreel.formats.transient import is_local

log = logging.getLogger(__name__)


def _store_hash(info: dict[str, Any]) -> str | None:
    lfs = info.get("lfs")
    if isinstance(lfs, dict) and (lfs.get("sha256") or lfs.get("oid")):
        return "sha256:" + str(lfs.get("sha256") or lfs.get("oid"))
    for key in ("blob_id", "ETag", "etag", "md5Hash", "sha256", "Last-Modified", "last-modified"):
        if info.get(key):
            return f"{key.lower()}:{str(info[key]).strip(chr(34))}"
    return None


def source_files(source: LeRobotSource, *, threads: int = 4) -> dict[str, dict[str, Any]]:
    """``{rel: {"size": bytes, "hash": "sha256:..." | "etag:..." | None}}`` for every data and video file."""
    rels = sorted({p for e in source.episodes for p in (e.data_path, *(v.path for v in e.videos.values()))})
    local = is_local(source.fs)

    def one(rel: str) -> tuple[str, dict[str, Any]]:
        try:
            info = source.file_info(rel)
            digest = "sha256:" + file_sha256(source.path(rel)) if local else _store_hash(info)
        except FileNotFoundError as e:
            raise SourceError("missing file", file=rel) from e
        except OSError as e:
            raise SourceError(f"cannot read the file to checksum it: {e}", file=rel) from e
        return rel, {"size": int(info["size"]), "hash": digest}

    with ThreadPoolExecutor(max(1, min(threads, len(rels)))) as pool:
        files = dict(pool.map(one, rels))
    blind = [rel for rel, f in files.items() if f["hash"] is None]
    if blind:
        log.warning("%d of %d source files (%s%s) come with no content hash or modification time (the server sends "
                    "neither ETag nor Last-Modified): a resume or update of this OUT compares them by size only, "
                    "so a file edited in place at the same size would go unnoticed", len(blind), len(files),
                    blind[0], ", ..." if len(blind) > 1 else "")
    return files


def changed_files(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(file, what changed) for files whose size or content hash differs, or that appeared or disappeared."""
    out = []
    for rel in sorted(set(old) | set(new)):
        a, b = old.get(rel), new.get(rel)
        if a is None or b is None:
            out.append((rel, "added" if a is None else "removed"))
        elif a["size"] != b["size"]:
            out.append((rel, f"size {a['size']} -> {b['size']}"))
        elif a.get("hash") and b.get("hash") and a["hash"] != b["hash"]:
            out.append((rel, f"content {a['hash'][:19]}... -> {b['hash'][:19]}..."))
    return out


def episode_files(source: LeRobotSource, episodes: list[int]) -> set[str]:
    """The data and video files ``episodes`` are read from."""
    out: set[str] = set()
    for i in episodes:
        e = source.episode(i)
        out.add(e.data_path)
        out.update(v.path for v in e.videos.values())
    return out
