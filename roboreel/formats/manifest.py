"""The compiled dataset's index, ``roboreel.json``: what is where, and how to check it.

Written last (temp name + rename) by the compiler, so its presence means the dataset is complete. Readers
refuse unknown format versions instead of guessing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import fsspec

from roboreel.formats.atomic import atomic_write_bytes
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.index import (
    EpisodeEntry,
    FileIndex,
    Index,
    Lengths,
    MemberInfo,
    MemoryIndex,
    ShardEntry,
)
from roboreel.formats.index_write import write_index
from roboreel.formats.lerobot_v3_layout import INFO_PATH
from roboreel.formats.shard import SHARD_DIR

__all__ = ["MANIFEST_NAME", "CameraSpec", "EpisodeEntry", "Manifest", "MemberInfo", "ShardEntry", "load_manifest",
           "write_manifest"]

FORMAT_NAME = "roboreel"
FORMAT_VERSION = 2  # 2: per-episode/per-shard facts in the columnar index (index.py); 1: all in this JSON
READABLE_VERSIONS = (1, 2)
MANIFEST_NAME = "roboreel.json"
COMPILE_RECORD_NAME = ".roboreel-compile.json"  # written by compile before anything else (compile/out/_record.py)


def unfinished_compile(exists: Callable[[str], bool], isdir: Callable[[str], bool], path: str) -> None:
    """Raise CompiledFormatError when the dataset root ``path`` (``exists`` / ``isdir`` of its relative paths) is a
    compile that has not written roboreel.json yet: its compile record is there (looked for before meta/info.json,
    which finalize writes first), or shards/ without meta/info.json. inspect and doctor say so, as validate does
    (``manifest-missing``), instead of "not a dataset" or reading it as a LeRobot source."""
    if exists(MANIFEST_NAME):
        return
    if exists(COMPILE_RECORD_NAME) or (not exists(INFO_PATH) and isdir(SHARD_DIR)):
        raise CompiledFormatError(f"no {MANIFEST_NAME}: compile has not finished (rerun it, or "
                                  "`roboreel compile --finalize` once every part is done)", file=path)


@dataclass(frozen=True)
class CameraSpec:
    """How one camera's clips are encoded."""

    key: str
    codec: str  # "hevc" | "h264" | ...
    height: int
    width: int
    pix_fmt: str = "yuv420p"
    gop: int | None = None  # keyframe interval in frames (None: unknown, e.g. stream-copied)
    bframes: int | None = None


class Manifest:
    """Dataset-wide facts (``features`` is the LeRobot feature dict of the compiled data, cameras included),
    plus the columnar index of shards and episodes (``index``), loaded lazily.

    Built from lists (``shards=``, ``episodes=``: writers and tests) it holds them in memory; loaded from a
    root it reads ``index/`` on demand. ``shards`` and ``episodes`` materialise every entry: fine for small
    datasets and tests; code that must scale goes through ``index`` (reader plan, validate, inspect).
    """

    def __init__(self, fps: int, features: dict[str, dict[str, Any]], cameras: list[CameraSpec],
                 tasks: dict[int, str], shards: list[ShardEntry] | None = None,
                 episodes: list[EpisodeEntry] | None = None, source: dict[str, Any] | None = None,
                 settings: dict[str, Any] | None = None, created_by: str = "", format: str = FORMAT_NAME,
                 format_version: int = FORMAT_VERSION, index_files: dict[str, Any] | None = None,
                 index: Index | None = None, meta_files: dict[str, str] | None = None) -> None:
        self.fps, self.features, self.cameras, self.tasks = fps, features, cameras, tasks
        # meta/ path -> sha256 of the bytes finalize wrote (empty: written before roboreel recorded them). meta/ is
        # what LeRobot and lerobot-train read (stats.json normalizes every feature), and nothing else covers it.
        self.meta_files = dict(meta_files or {})
        self.source, self.settings = dict(source or {}), dict(settings or {})
        self.created_by, self.format, self.format_version = created_by, format, format_version
        self.index_files = index_files
        self._shards, self._episodes = shards, episodes
        if (shards is None) != (episodes is None):
            raise ValueError("give both shards and episodes, or neither")
        if shards is None and index is None:
            raise ValueError("a manifest needs its shards and episodes, or an index")
        self._index = index

    def __getstate__(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        if self.index_files is not None:  # file-backed: workers reload what they read, nothing per episode rides
            d["_shards"] = d["_episodes"] = None
        if "files" in self.source:  # provenance (a checksum per source file) stays in roboreel.json: no reader uses it
            d["source"] = {k: v for k, v in self.source.items() if k != "files"}
        return d

    @property
    def index(self) -> Index:
        if self._index is None:
            self._index = MemoryIndex(self._shards or [], self._episodes or [])
        return self._index

    @property
    def shards(self) -> list[ShardEntry]:
        """Every shard with its episode list (materialised once; O(episodes))."""
        if self._shards is None:
            ix = self.index
            self._shards = [ShardEntry(ix.shards["path"][i], int(ix.shards["size"][i]), ix.shards["sha256"][i],
                                       [int(e) for e in ix.shard_episodes(i)]) for i in range(ix.num_shards)]
        return self._shards

    @property
    def episodes(self) -> list[EpisodeEntry]:
        """Every episode's entry (materialised once; O(episodes): prefer ``index`` where size matters)."""
        if self._episodes is None:
            self._episodes = list(self.index.iter_entries())
        return self._episodes

    @property
    def camera_keys(self) -> list[str]:
        return [c.key for c in self.cameras]

    @property
    def num_episodes(self) -> int:
        if self._episodes is not None:
            return len(self._episodes)
        return int(self.index_files["episodes_total"]) if self.index_files else self.index.num_episodes

    @property
    def num_shards(self) -> int:
        return len(self._shards) if self._shards is not None else self.index.num_shards

    @property
    def total_frames(self) -> int:
        if self._episodes is not None:
            return sum(e.length for e in self._episodes)
        if self.index_files:
            return int(self.index_files["frames_total"])
        return int(self.index.shard_frames().sum())

    @property
    def lengths(self) -> Lengths:
        """Episode index -> length (two arrays, not a dict: 16 bytes an episode)."""
        return self.index.lengths

    def episode(self, index: int) -> EpisodeEntry:
        """The entry for episode ``index`` (KeyError if absent)."""
        if self._episodes is not None:
            lookup = self.__dict__.get("_by_index")
            if lookup is None or len(lookup) != len(self._episodes):
                lookup = self.__dict__["_by_index"] = {e.index: e for e in self._episodes}
            return lookup[index]
        return self.index.entry(index)

    def fingerprint(self) -> str:
        """A short hash of the shard/episode layout (the resume state refuses a different one): the index
        files' checksums when there are files, else the lists."""
        if self.index_files is not None:
            files = [self.index_files["shards"], *self.index_files["episodes"]]
            text = json.dumps([f["sha256"] for f in files])
        else:
            text = json.dumps([[s.path, s.episodes] for s in self.shards] + [[e.index, e.length] for e in self.episodes])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # -- (de)serialisation ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON form (format 2): dataset-wide facts and the index descriptor; needs ``index_files``."""
        if self.index_files is None:
            raise ValueError("the index is in memory: write it with write_manifest(root, manifest)")
        return {
            "format": self.format, "format_version": self.format_version, "created_by": self.created_by,
            "fps": self.fps, "features": self.features, "cameras": [asdict(c) for c in self.cameras],
            "tasks": [{"task_index": int(k), "task": v} for k, v in sorted(self.tasks.items())],
            "source": self.source, "settings": self.settings, "index": self.index_files,
            **({"meta_files": self.meta_files} if self.meta_files else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: Any, *, file: str = MANIFEST_NAME, root: str | None = None,
                  storage_options: dict[str, Any] | None = None) -> Manifest:
        """Build a manifest from parsed JSON, checking every field's type (CompiledFormatError otherwise), so
        code reading a manifest never meets a string where it counts frames. Format 1 manifests (every episode
        in the JSON) are read too; format 2 needs ``root`` to find ``index/``."""
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            raise CompiledFormatError(f"not a roboreel manifest (format={d.get('format')!r})"
                                      if isinstance(d, dict) else "not a roboreel manifest", file=file)
        version = d.get("format_version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise CompiledFormatError(
                f"manifest format_version {version!r} is not supported by this roboreel (reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}); upgrade roboreel or recompile",
                file=file,
            )
        try:
            tasks = d["tasks"]
            if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
                raise TypeError(f"tasks must be a list of {{task_index, task}} objects, got {tasks!r:.200}")
            for t in tasks:
                _check_value(t["task_index"], "int", "tasks[].task_index")
                _check_value(t["task"], "str", "tasks[].task")
            common = dict(
                fps=d["fps"],
                features={k: _obj(v, f"features[{k!r}]") for k, v in _obj(d["features"], "features").items()},
                cameras=[CameraSpec(**_obj(c, "cameras[]")) for c in _list(d["cameras"], "cameras")],
                tasks={t["task_index"]: t["task"] for t in tasks},
                source=_obj(d.get("source", {}), "source"),
                settings=_obj(d.get("settings", {}), "settings"),
                created_by=d.get("created_by", ""),
                format_version=version,
                meta_files=_check_meta_files(d.get("meta_files", {})),
            )
            if version == 1:
                m = cls(**common,
                        shards=[ShardEntry(**_obj(s, "shards[]")) for s in _list(d["shards"], "shards")],
                        episodes=[
                            EpisodeEntry(**{**_obj(e, "episodes[]"), "members": [
                                MemberInfo(**_obj(x, "episodes[].members[]")) for x in _list(e["members"], "members")]})
                            for e in _list(d["episodes"], "episodes")
                        ])
                for s in m.shards:
                    _check_fields(s, "shards[]")
                for e in m.episodes:
                    _check_fields(e, "episodes[]")
            else:
                descriptor = _check_descriptor(d["index"])
                if root is None:
                    raise ValueError("a format 2 manifest needs the dataset root to read its index")
                m = cls(**common, index_files=descriptor,
                        index=FileIndex(root, descriptor, storage_options=storage_options))
            _check_value(m.fps, "int", "fps")
            _check_value(m.created_by, "str", "created_by")
            for c in m.cameras:
                _check_fields(c, "cameras[]")
        except (KeyError, TypeError, ValueError) as e:
            raise CompiledFormatError(f"malformed manifest: {e!r}", file=file) from e
        if m.fps <= 0:
            raise CompiledFormatError(f"malformed manifest: fps must be positive, got {m.fps}", file=file)
        return m

    @classmethod
    def from_json(cls, text: str | bytes, *, file: str = MANIFEST_NAME, root: str | None = None,
                  storage_options: dict[str, Any] | None = None) -> Manifest:
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
            raise CompiledFormatError(f"manifest is not valid JSON: {e}", file=file) from e
        return cls.from_dict(d, file=file, root=root, storage_options=storage_options)


def _check_meta_files(d: Any) -> dict[str, str]:
    """``meta_files``: meta/ paths to sha256 hex digests (a string where a digest belongs fails here, not in a
    comparison that would call every file changed)."""
    files = _obj(d, "meta_files")
    for rel, digest in files.items():
        if not rel.startswith("meta/") or ".." in rel.split("/"):
            raise ValueError(f"meta_files names {rel!r}, not a file under meta/")
        _check_value(digest, "str", f"meta_files[{rel!r}]")
        if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
            raise ValueError(f"meta_files[{rel!r}] is not a sha256 hex digest: {digest!r:.80}")
    return dict(files)


def _check_descriptor(d: Any) -> dict[str, Any]:
    """The ``index`` object of a format 2 manifest: file references with sizes, checksums and row counts."""
    d = _obj(d, "index")
    for ref in [_obj(d["shards"], "index.shards"), *(_obj(r, "index.episodes[]") for r in _list(d["episodes"],
                                                                                                "index.episodes"))]:
        _check_value(ref["path"], "str", "index file path")
        for key in ("size", "rows"):
            _check_value(ref[key], "int", f"index file {key}")
        _check_value(ref["sha256"], "str", "index file sha256")
        if ref["path"].startswith("/") or ".." in ref["path"].split("/"):
            raise ValueError(f"index file path {ref['path']!r} leaves the dataset root")
    for key in ("episodes_total", "frames_total", "row_group_rows"):
        _check_value(d[key], "int", f"index.{key}")
    if d["row_group_rows"] < 1:
        raise ValueError(f"index.row_group_rows must be >= 1, got {d['row_group_rows']}")
    for ref in d["episodes"][:-1]:  # detail reads address row group g as rows [g * row_group_rows, ...)
        if ref["rows"] % d["row_group_rows"]:
            raise ValueError(f"index file {ref['path']!r} holds {ref['rows']} rows, not whole row groups of "
                             f"{d['row_group_rows']}")
    return d


# -- type checks for from_dict --------------------------------------------------------------------------------
def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{what} must be a list, got {value!r:.200}")
    return value


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be an object, got {value!r:.200}")
    return value


def _split_args(inner: str) -> list[str]:
    """``"str, dict[str, Any]"`` -> ``["str", "dict[str, Any]"]`` (commas at bracket depth 0)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    return [*parts, inner[start:].strip()]


def _check_value(value: Any, annotation: str, what: str) -> None:
    """Raise TypeError unless ``value`` fits ``annotation`` (the string form of a field's type hint)."""
    if annotation == "Any":
        return
    if annotation.endswith(" | None"):
        if value is not None:
            _check_value(value, annotation[: -len(" | None")], what)
        return
    if annotation in ("int", "str"):
        ok = isinstance(value, str) if annotation == "str" else isinstance(value, int) and not isinstance(value, bool)
    elif annotation.startswith("list["):
        ok = isinstance(value, list)
        if ok:
            for v in value:
                _check_value(v, annotation[5:-1], what + "[]")
    elif annotation.startswith("dict["):
        ok = isinstance(value, dict)
        if ok:
            key, val = _split_args(annotation[5:-1])
            for k, v in value.items():
                _check_value(k, key, what + " key")
                _check_value(v, val, f"{what}[{k!r:.40}]")
    else:  # a dataclass: checked field by field
        _check_fields(value, what)
        return
    if not ok:
        raise TypeError(f"{what} must be {annotation}, got {value!r:.200}")


def _check_fields(obj: Any, what: str) -> None:
    for f in fields(obj):
        if f.name.startswith("_"):
            continue
        _check_value(getattr(obj, f.name), str(f.type), f"{what}.{f.name}")


def load_manifest(url: str, *, storage_options: dict[str, Any] | None = None) -> Manifest:
    """Read ``roboreel.json`` from a compiled dataset root (local path or fsspec URL); the index is read lazily."""
    fs, root = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
    path = root.rstrip("/") + "/" + MANIFEST_NAME
    try:
        with fs.open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError as e:
        raise CompiledFormatError("no manifest: not a compiled roboreel dataset, or compile has not finished",
                                  file=path) from e
    return Manifest.from_json(text, file=path, root=str(url), storage_options=storage_options)


def write_manifest(root: str | os.PathLike[str], manifest: Manifest) -> None:
    """Write ``roboreel.json`` atomically into a local compiled dataset root, last. A manifest holding its lists
    in memory (or whose lists were materialised, possibly edited) gets its index written first."""
    if manifest._shards is not None:
        manifest.index_files = write_index(root, manifest.shards, manifest.episodes)
        manifest._index = FileIndex(os.fspath(root), manifest.index_files)
        manifest.format_version = FORMAT_VERSION
    atomic_write_bytes(os.path.join(os.fspath(root), MANIFEST_NAME), manifest.to_json().encode())


def transform_summary(settings: dict[str, Any]) -> str | None:
    """One line saying how a compile changed frame rate and camera sizes (``settings["transform"]``, written by
    compile/video/_resize.py), e.g. "20 -> 10 fps (every 2nd source frame); top 480x640 -> 224x224 (bilinear)"; None
    for a compile that kept both."""
    t = settings.get("transform")
    if not isinstance(t, dict):
        return None
    parts = []
    if t.get("frame_step", 1) != 1:
        parts.append(f"{t['source_fps']} -> {t['fps']} fps (frames 0, {t['frame_step']}, {2 * t['frame_step']}, "
                     "... of each episode)")
    for key, c in sorted((t.get("cameras") or {}).items()):
        (h0, w0), (h, w) = c["source"], c["size"]
        parts.append(f"{key} {h0}x{w0} -> {h}x{w} ({c['filter']})")
    return "; ".join(parts) or "none"
