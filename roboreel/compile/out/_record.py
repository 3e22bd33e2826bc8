"""The compile OUT directory's own bookkeeping: the record (what is being compiled) and a source meta snapshot.

The record, ``OUT/.roboreel-compile.json``, is written before anything else. It names the source (URL and
fingerprint), the settings and the shard plan; a later run into the same OUT resumes only when all of these
match, and refuses otherwise, so one OUT never mixes bytes from two sources or two settings. The snapshot
(a byte copy of the source's meta/) lets ``finalize(OUT)`` rewrite meta/ without access to the source, e.g. in
a SLURM job on a node that cannot reach it.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from roboreel.compile.out._locks import ensure_idle
from roboreel.compile.out._pack import TMP_SUFFIX, atomic_write
from roboreel.compile.out.paths import MANIFEST, RECORD, SNAPSHOT_DIR, sidecar_path
from roboreel.compile.settings import CompileSettings
from roboreel.compile.source import changed_files
from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.errors import CompiledFormatError, SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource

RECORD_FORMAT = "roboreel-compile-record"
RECORD_VERSION = 1


def make_record(*, url: str, fingerprint: str, settings: CompileSettings, chunks_size: int,
              shards: list[list[int]], files: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``files``: content checksums of the source's data and video files (compile/source/_files.py); they go on
    into the manifest's ``source.files``."""
    return {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "source": {"url": url, "fingerprint": fingerprint, **({"files": files} if files is not None else {})},
        "settings": settings.to_dict(),
        "chunks_size": chunks_size,
        "shards": shards,
    }


def read_record(out: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(out, RECORD), "rb") as f:
            record = json.loads(f.read())
    except (FileNotFoundError, NotADirectoryError):  # NotADirectoryError: OUT is a file
        return None
    except ValueError as e:
        raise CompiledFormatError(f"compile record is not valid JSON: {e}", file=os.path.join(out, RECORD)) from e
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get("version") != RECORD_VERSION:
        raise CompiledFormatError("not a roboreel compile record (or written by another version)",
                                  file=os.path.join(out, RECORD))
    return record


def record_mismatch(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between a record found in OUT and this run's (empty: same compile, resume is safe)."""
    diffs = []
    if old["source"]["fingerprint"] != new["source"]["fingerprint"]:
        diffs.append(f"source fingerprint ({old['source']['url']} vs {new['source']['url']})")

    was, now = _settings(old["settings"]), _settings(new["settings"])
    for key in sorted(set(was) | set(now)):
        if was.get(key) != now.get(key):
            diffs.append(f"setting {key}: {was.get(key)!r} vs {now.get(key)!r}")
    if old.get("chunks_size") != new.get("chunks_size") or old.get("shards") != new.get("shards"):
        diffs.append("shard plan")
    return diffs


def _settings(d: dict[str, Any]) -> dict[str, Any]:
    """A record's settings with the defaults of settings added since it was written (what its bytes were made
    with), so a record from an older roboreel compares by meaning; settings this version does not know stay as
    they are (and then differ)."""
    try:
        return CompileSettings.from_dict(d).to_dict()
    except (TypeError, ValueError):
        return dict(d)


def finished_changed(out: str, old: dict[str, Any] | None, record: dict[str, Any],
                     shard_files: list[set[str]]) -> list[tuple[str, str, int]]:
    """(file, what changed, shard) for each source file that changed (content, even at the same size) since a
    finished shard of OUT was compiled from it. Such a shard must not be kept as it is: the run becomes an update
    (compile/out/_update.py), which recompiles what the file holds."""
    if old is None or "files" not in old["source"] or "files" not in record["source"]:
        return []  # a fresh OUT, or a record from before content checksums
    found = []
    for rel, what in changed_files(old["source"]["files"], record["source"]["files"]):
        for shard, files in enumerate(shard_files):
            if rel in files and os.path.exists(os.path.join(out, sidecar_path(shard))):
                found.append((rel, what, shard))
    return found


def check_source_files(out: str, record: dict[str, Any], shard_files: list[set[str]]) -> None:
    """On a resume: refuse when a source file changed since a finished shard was compiled from it, naming the
    file and the shard (compile_dataset turns that case into an update first, so this is the last guard); a
    changed file that only unfinished shards read is fine (a user fixing a broken file and rerunning), and the
    record then records its new checksum."""
    old = read_record(out)
    if old is None or "files" not in old["source"] or "files" not in record["source"]:
        return
    for rel, what, shard in finished_changed(out, old, record, shard_files):
        raise SourceError(
            f"changed ({what}) since shard {shard} in {out} was compiled from it; a resume would mix "
            "two versions of the file: restore it, or pass --overwrite to recompile", file=rel)
    if changed_files(old["source"]["files"], record["source"]["files"]):
        atomic_write(os.path.join(out, RECORD),
                     (json.dumps({**old, "source": record["source"]}, indent=1) + "\n").encode())


def is_compile_dir(out: str) -> bool:
    """Whether ``out`` looks like a roboreel compile output (safe for --overwrite to delete)."""
    return os.path.exists(os.path.join(out, RECORD)) or os.path.exists(os.path.join(out, MANIFEST))


def _entries(out: str) -> list[str]:
    """OUT's entries, ignoring temp files of a record being written (a concurrent --part job starting up)."""
    if not os.path.isdir(out):
        return []
    return [n for n in os.listdir(out) if not (n.startswith(f".{RECORD}.") and n.endswith(TMP_SUFFIX))]


def prepare_out(out: str, record: dict[str, Any], *, overwrite: bool) -> bool:
    """Make OUT ready for this compile and write its record; returns True when OUT started empty.

    Refuses (FileExistsError) a non-empty OUT that is not this same compile.
    """
    if os.path.exists(out) and not os.path.isdir(out):
        raise FileExistsError(f"{out} exists and is not a directory")
    if _entries(out):
        if overwrite:
            if not is_compile_dir(out):
                raise FileExistsError(
                    f"{out} is not empty and is not a roboreel compile output; refusing to delete it with "
                    "--overwrite (choose an empty or new directory)"
                )
            ensure_idle(out)  # a running compile's files are not deleted under it
            shutil.rmtree(out)
        else:
            old = read_record(out)
            if old is None:
                raise FileExistsError(f"{out} is not empty and holds no roboreel compile (choose another OUT)")
            diffs = record_mismatch(old, record)
            if diffs:
                raise FileExistsError(
                    f"{out} holds a compile of a different source or settings ({'; '.join(diffs)}); "
                    "pass --overwrite to replace it, or choose another OUT"
                )
    fresh = not _entries(out)
    os.makedirs(out, exist_ok=True)
    record_path = os.path.join(out, RECORD)
    if not os.path.exists(record_path):  # a matching record stays as it is (it may name the source by another URL)
        atomic_write(record_path, (json.dumps(record, indent=1) + "\n").encode())
    return fresh


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_snapshot(out: str, source: LeRobotSource) -> None:
    """Copy the source's meta/ files (info, tasks, stats, episodes) under OUT/.roboreel-parts/source/, and
    remove any other file there."""
    rels = [v3.INFO_PATH, v3.TASKS_PATH, *source.episode_files()]
    if source.stats is not None:  # not ``exists``: over HTTP a transient fault would drop the stats silently
        rels.append(v3.STATS_PATH)
    for rel in rels:
        dest = os.path.join(out, SNAPSHOT_DIR, rel)
        with source.open(rel) as f:
            data = f.read()
        if _read_bytes(dest) != data:
            atomic_write(dest, data)
    # an update (compile/out/_update.py) from a source whose meta/ had other files: none of them may stay
    root = os.path.join(out, SNAPSHOT_DIR)
    for d, _, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(d, name), root).replace(os.sep, "/")
            if rel not in rels and not name.endswith(TMP_SUFFIX):
                os.unlink(os.path.join(d, name))


def snapshot_source(out: str) -> LeRobotSource:
    """The snapshot as a (meta-only) LeRobotSource."""
    path = os.path.join(out, SNAPSHOT_DIR)
    if not os.path.exists(os.path.join(path, v3.INFO_PATH)):
        raise CompiledFormatError("the source meta snapshot is missing: rerun compile on this OUT",
                                  file=os.path.join(out, SNAPSHOT_DIR))
    return LeRobotSource(path)
