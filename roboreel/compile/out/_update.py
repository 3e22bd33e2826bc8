"""Compile into an OUT that holds a compile of an earlier state of the same source: reuse what is unchanged.

The protocol (docs/incremental.md), each step crash-safe, every decision a pure function of OUT and the source:

1. ``plan_update``: the old record and this run's record differ only in the source (fingerprint, files) and the shard
   plan, and the two share the source URL or at least one episode fingerprint (source/_fingerprint.py); otherwise the run
   stops with the old "different source or settings" message.
2. ``begin_update``: the clips of the previous generation's sidecars are listed with their fingerprints and byte
   spans in the old shard tars (``update.json``, written atomically first: a kill after it and a rerun reads it
   back instead of the sidecars it has started to change). A new shard whose episodes and episode fingerprints
   equal the old shard of the same number is *kept*: its sidecar moves to the new generation and names the old
   tar, byte for byte. Every other old sidecar is removed, unfinished clips too, and the new record (generation + 1)
   replaces the old one: from here the run is an ordinary resume.
3. Shard jobs copy a clip whose fingerprint is in ``update.json`` out of the old tar (sha256 checked) instead of
   encoding it; new shards get generation-tagged names, so no file the published manifest names is overwritten.
4. finalize publishes the new ``roboreel.json`` by one rename, then removes what only older generations used.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

from roboreel.compile.out._locks import out_lock
from roboreel.compile.out._pack import atomic_write
from roboreel.compile.out._parts import read_sidecar, remove_clips_dir
from roboreel.compile.out._record import read_record, record_mismatch
from roboreel.compile.out.paths import (
    DATA_DIR,
    DATA_FILE_NAME,
    INDEX_DIR,
    INDEX_FILE_NAME,
    PARTS_DIR,
    RECORD,
    SHARDS_DIR,
    SIDECAR_NAME,
    TAR_NAME,
    TRANSITION_LOCK,
    UPDATE_STATE,
    data_path,
    sidecar_path,
)
from roboreel.formats.shard import clip_member

log = logging.getLogger(__name__)

BLOCK = 512  # USTAR: a member is a 512-byte header, then its data padded to 512


def generation(record: dict[str, Any] | None) -> int:
    """A record's compile generation (1 for a first compile and for records written before generations existed)."""
    return int((record or {}).get("generation", 1))


def _old_sidecars(out: str, old: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The previous generation's sidecars present in OUT, by shard number."""
    gen = generation(old)
    sides = {i: read_sidecar(out, i, gen) for i in range(len(old["shards"]))}
    return {i: side for i, side in sides.items() if side is not None}


def plan_update(out: str, old: dict[str, Any], record: dict[str, Any],
                fps: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The reuse state of an update of ``out`` from ``old`` to ``record``, or None when the two are not two states
    of one source compiled with the same settings (then the caller refuses as before)."""
    diffs = record_mismatch(old, record)
    if any(d.startswith("setting ") for d in diffs) or old.get("chunks_size") != record.get("chunks_size"):
        return None
    state = _read_state(out, generation(old))
    if state is None:
        state = _harvest(out, old)
    new_fps = {f["episode"] for f in fps.values() if f["episode"]} | {
        c for f in fps.values() for c in f["clips"].values() if c}
    same_url = old["source"].get("url") == record["source"].get("url")
    if not same_url and not (new_fps & (set(state["clips"]) | set(state["episodes"]))):
        return None
    return state


def _harvest(out: str, old: dict[str, Any]) -> dict[str, Any]:
    """Every clip of the previous generation with a fingerprint: where its bytes lie in which old tar."""
    clips: dict[str, Any] = {}
    episodes: dict[str, Any] = {}
    for shard, side in sorted(_old_sidecars(out, old).items()):
        prints = side.get("fingerprints") or {}
        offset = 0
        for entry in side["entries"]:
            spans = {}
            for m in entry["members"]:  # in tar order
                spans[m["name"]] = (offset + BLOCK, m["size"], m["sha256"])
                offset += BLOCK + -(-m["size"] // BLOCK) * BLOCK
            ep = str(entry["index"])
            own = prints.get(ep) or {}
            if own.get("episode"):
                episodes[own["episode"]] = {"shard": shard, "episode": entry["index"]}
            for cam, fp in (own.get("clips") or {}).items():
                span = spans.get(clip_member(entry["index"], cam))
                if not fp or fp in clips or span is None:
                    continue
                info = dict(side["clips"][ep][cam])
                # a transforming compile's camera stats: moved from the clip's json to the sidecar's "stats"
                stats = info.pop("stats", None) or ((side.get("stats") or {}).get(ep) or {}).get(cam)
                clips[fp] = {"tar": side["tar"]["path"], "offset": span[0], "size": span[1], "sha256": span[2],
                             "info": info, **({"stats": stats} if stats is not None else {})}
    return {"from": generation(old), "to": generation(old) + 1, "clips": clips, "episodes": episodes}


def _read_state(out: str, gen_from: int) -> dict[str, Any] | None:
    try:
        with open(os.path.join(out, UPDATE_STATE), "rb") as f:
            state = json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None
    return state if state.get("from") == gen_from else None


def read_state(out: str, gen: int) -> dict[str, Any] | None:
    """The reuse state of the update that made generation ``gen`` of OUT, if one is under way."""
    state = _read_state(out, gen - 1)
    return state if state is not None and state.get("to") == gen else None


@contextlib.contextmanager
def transition_lock(out: str) -> Iterator[None]:
    """Held while a run decides on and makes an update's transition (steps 1-2): the ``--part`` jobs of one update
    (a SLURM array) start together, and a second job making the transition again would remove the clips the
    first has started (``remove_clips_dir``). Whoever waits reads OUT's record again inside, finds the new
    generation, and resumes (_locks.py)."""
    with out_lock(out, TRANSITION_LOCK, "update transitions"):
        yield


def begin_update(out: str, old: dict[str, Any], record: dict[str, Any], state: dict[str, Any],
                 fps: dict[int, dict[str, Any]]) -> int:
    """Steps 2 of the module doc; returns how many shards were kept byte for byte."""
    gen = state["to"]
    if generation(read_record(out)) == gen:  # another --part job of this update got here first
        return 0
    atomic_write(os.path.join(out, UPDATE_STATE), (json.dumps(state) + "\n").encode())
    old_sides = _old_sidecars(out, old)
    kept = 0
    for i, plan in enumerate(record["shards"]):
        side = old_sides.pop(i, None)
        if side is None:
            continue
        if side["episodes"] == plan and all(
                fps[e]["episode"] and (side.get("fingerprints") or {}).get(str(e), {}).get("episode")
                == fps[e]["episode"] for e in plan):
            clips = {ep: {cam: {**c, "reused": True} for cam, c in cs.items()} for ep, cs in side["clips"].items()}
            side = {**side, "generation": gen, "reused": list(plan), "clips": clips}
            atomic_write(os.path.join(out, sidecar_path(i)), (json.dumps(side, indent=1) + "\n").encode())
            kept += 1
        else:
            _drop_old(out, i, generation(old))
    for i in old_sides:  # old shards past the new plan's end
        _drop_old(out, i, generation(old))
    remove_clips_dir(out)  # unfinished clips of the old plan: their shard numbers mean other episodes now
    atomic_write(os.path.join(out, RECORD), (json.dumps({**record, "generation": gen}, indent=1) + "\n").encode())
    log.info("updating %s to generation %d: %d of %d shards kept, %d clips reusable", out, gen, kept,
             len(record["shards"]), len(state["clips"]))
    return kept


def remove_unused(out: str, *, keep: set[str], shards: int, chunks_size: int) -> int:
    """After publication: remove the shard tars and index files ``keep`` (what the published manifest names) does
    not list, data files and sidecars past the plan's ``shards``, and the update's state. Only roboreel's own
    names are touched. A reader still holding an older manifest then fails naming the update (reader/fetch)."""
    removed = 0
    for top, pattern in ((SHARDS_DIR, TAR_NAME), (INDEX_DIR, INDEX_FILE_NAME)):
        for d, _, names in os.walk(os.path.join(out, top), topdown=False):
            for name in names:
                rel = os.path.relpath(os.path.join(d, name), out).replace(os.sep, "/")
                if pattern.fullmatch(name) and rel not in keep:
                    _unlink(os.path.join(d, name))
                    removed += 1
            if d != os.path.join(out, top) and not os.listdir(d):
                os.rmdir(d)
    data = {data_path(i, chunks_size) for i in range(shards)}
    for d, _, names in os.walk(os.path.join(out, DATA_DIR)):
        for name in names:
            rel = os.path.relpath(os.path.join(d, name), out).replace(os.sep, "/")
            if DATA_FILE_NAME.fullmatch(name) and rel not in data:
                _unlink(os.path.join(d, name))
                removed += 1
    parts = os.path.join(out, PARTS_DIR)
    for name in os.listdir(parts) if os.path.isdir(parts) else []:
        m = SIDECAR_NAME.fullmatch(name)
        if m and int(m.group(1)) >= shards:
            _unlink(os.path.join(parts, name))
    _unlink(os.path.join(out, UPDATE_STATE))
    if removed:
        log.info("%s: removed %d files of earlier compile generations", out, removed)
    return removed


def _drop_old(out: str, shard: int, gen: int) -> None:
    """Remove shard ``shard``'s sidecar if it is still of generation ``gen``: a concurrent ``--part`` job of the
    same update may have written the new generation's there meanwhile, which must stay."""
    if read_sidecar(out, shard, gen) is not None:
        _unlink(os.path.join(out, sidecar_path(shard)))


def _unlink(path: str) -> None:
    """Remove a file another ``--part`` job may have removed first."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def reuse_for(state: dict[str, Any] | None, fps: dict[int, dict[str, Any]], episodes: list[int]) -> dict[str, Any]:
    """The reusable clips of ``episodes`` (fingerprint -> where), for one shard job."""
    if not state:
        return {}
    clips = state["clips"]
    return {fp: clips[fp] for e in episodes for fp in fps[e]["clips"].values() if fp and fp in clips}


__all__ = ["begin_update", "generation", "plan_update", "read_state", "remove_unused", "reuse_for", "transition_lock"]
