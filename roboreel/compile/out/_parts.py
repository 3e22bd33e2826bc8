"""What ``.roboreel-parts/`` holds, read back: shard sidecars (is a shard done?), finished clip files (may a rerun
reuse them?), an update's clips in an old tar, and the temp files a killed writer left.

A shard counts as done when its sidecar exists and the files it records have the recorded sizes and sha256; a
clip counts as finished when its json exists, its mp4 matches it, and the source file is still the one the
compile record names (jobs/ writes both, sidecar and json last).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from contextlib import suppress
from typing import Any

from roboreel.compile.out._pack import remove_stale_temps
from roboreel.compile.out.paths import CLIPS_DIR, clip_paths, clips_dir, shard_files, sidecar_path
from roboreel.formats.atomic import TMP_SUFFIX
from roboreel.formats.manifest import EpisodeEntry, MemberInfo
from roboreel.formats.shard import file_sha256, sha256_hex


def sweep_temps(out: str, shard: int, chunks_size: int, generation: int = 1) -> int:
    """Remove temp files a killed writer of this shard left behind; returns how many."""
    return sum(remove_stale_temps(os.path.join(out, rel)) for rel in shard_files(shard, chunks_size, generation))


def read_sidecar(out: str, shard: int, generation: int | None = None) -> dict[str, Any] | None:
    """The shard's sidecar as written (of compile ``generation``, when given), or None: absent, unreadable (a
    killed writer's leftovers are temp files, never this name, but a hand-damaged one reads as absent) or of
    another generation."""
    try:
        with open(os.path.join(out, sidecar_path(shard)), "rb") as f:
            side = json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None
    if generation is not None and side.get("generation", 1) != generation:
        return None
    return side


def shard_done(out: str, shard: int, generation: int | None = None) -> dict[str, Any] | None:
    """The shard's sidecar if the shard is complete: sidecar present (of compile ``generation``, when given), its
    files present with the recorded sizes and sha256 (a resume re-reads finished shards once, so bit rot or a
    stray write is recompiled, not kept)."""
    side = read_sidecar(out, shard, generation)
    if side is None:
        return None
    for key in ("tar", "data"):
        try:
            path, size, digest = os.path.join(out, side[key]["path"]), side[key]["size"], side[key]["sha256"]
            if os.path.getsize(path) != size or file_sha256(path) != digest:
                return None
        except (OSError, KeyError, TypeError):
            return None
    return side


def entry_from_dict(d: dict[str, Any]) -> EpisodeEntry:
    """An EpisodeEntry back from its sidecar form."""
    return EpisodeEntry(**{**d, "members": [MemberInfo(**m) for m in d["members"]]})


def clip_done(out: str, shard: int, episode: int, camera: str, source_file: dict[str, Any]) -> dict[str, Any] | None:
    """The clip's json if a finished clip of this episode and camera exists and was made from the source file
    the record names now (same size and hash), else None."""
    mp4, meta = clip_paths(shard, episode, camera)
    try:
        with open(os.path.join(out, meta), "rb") as f:
            doc = json.loads(f.read())
        if doc.get("source_file") != source_file:
            return None
        size = os.path.getsize(os.path.join(out, mp4))
    except (OSError, ValueError):
        return None
    return doc if size == doc.get("size") else None


def read_reused(out: str, where: dict[str, Any]) -> bytes | None:
    """A clip of OUT's previous compile generation, from its old tar (compile/out/_update.py), or None when its bytes
    are not there intact (then it is made again)."""
    try:
        with open(os.path.join(out, where["tar"]), "rb") as f:
            f.seek(where["offset"])
            data = f.read(where["size"])
    except OSError:
        return None
    return data if len(data) == where["size"] and sha256_hex(data) == where["sha256"] else None


def read_clip(out: str, shard: int, episode: int, camera: str, doc: dict[str, Any]) -> bytes | None:
    """A finished clip's bytes, or None if they no longer match its json (then it is made again)."""
    mp4, _ = clip_paths(shard, episode, camera)
    try:
        with open(os.path.join(out, mp4), "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data if len(data) == doc["size"] and sha256_hex(data) == doc["sha256"] else None


def sweep_clip_temps(out: str, shard: int) -> int:
    """Remove temp files a killed clip writer of this shard left; returns how many."""
    found = glob.glob(os.path.join(glob.escape(os.path.join(out, clips_dir(shard))), f".*{TMP_SUFFIX}"))
    for path in found:
        with suppress(FileNotFoundError):
            os.unlink(path)
    return len(found)


def remove_clips(out: str, shard: int) -> None:
    """Delete a packed shard's clips. (The shared clips dir is removed only once every shard is done, see
    ``remove_clips_dir``: removing it here could race a worker of another shard or part creating its dir.)"""
    shutil.rmtree(os.path.join(out, clips_dir(shard)), ignore_errors=True)


def remove_clips_dir(out: str) -> None:
    """Remove the (empty) clips dir once every shard is packed; clips left by a killed run go with it."""
    shutil.rmtree(os.path.join(out, CLIPS_DIR), ignore_errors=True)
