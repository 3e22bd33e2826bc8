"""The compiled dataset's index, ``roboreel.json``: what is where, and how to check it.

Written last (temp name + rename) by the compiler, so its presence means the dataset is complete. Readers
refuse unknown format versions instead of guessing.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import fsspec

from roboreel.formats.atomic import atomic_write_bytes
from roboreel.formats.errors import CompiledFormatError

FORMAT_NAME = "roboreel"
FORMAT_VERSION = 1
MANIFEST_NAME = "roboreel.json"


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


@dataclass(frozen=True)
class MemberInfo:
    """One tar member: its name inside the shard, byte size and sha256 (hex)."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class EpisodeEntry:
    """One episode: its global frame range, the shard holding it, and every member of its record."""

    index: int
    length: int
    from_index: int
    to_index: int
    shard: int  # position in Manifest.shards
    tasks: list[str]
    members: list[MemberInfo]
    rows_sha256: str | None = None  # hash of the episode's tabular values (integrity end to end)

    def member(self, name: str) -> MemberInfo:
        for m in self.members:
            if m.name == name:
                return m
        raise KeyError(name)


@dataclass(frozen=True)
class ShardEntry:
    """One tar shard: path relative to the dataset root, size, sha256, and its episodes in file order."""

    path: str
    size: int
    sha256: str
    episodes: list[int]


@dataclass
class Manifest:
    """The whole index. ``features`` is the LeRobot feature dict of the compiled data (cameras included)."""

    fps: int
    features: dict[str, dict[str, Any]]
    cameras: list[CameraSpec]
    tasks: dict[int, str]
    shards: list[ShardEntry]
    episodes: list[EpisodeEntry]
    source: dict[str, Any] = field(default_factory=dict)  # url, fingerprint
    settings: dict[str, Any] = field(default_factory=dict)  # compile settings that shaped the bytes
    created_by: str = ""
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION

    @property
    def camera_keys(self) -> list[str]:
        return [c.key for c in self.cameras]

    @property
    def total_frames(self) -> int:
        return sum(e.length for e in self.episodes)

    @property
    def lengths(self) -> dict[int, int]:
        """Episode index -> length (computed once; the split and the reader ask for it every epoch)."""
        lengths = self.__dict__.get("_lengths")
        if lengths is None:
            lengths = self.__dict__["_lengths"] = {e.index: e.length for e in self.episodes}
        return lengths

    def episode(self, index: int) -> EpisodeEntry:
        """The entry for episode ``index`` (KeyError if absent)."""
        lookup = self.__dict__.get("_by_index")
        if lookup is None:
            lookup = {e.index: e for e in self.episodes}
            self.__dict__["_by_index"] = lookup
        return lookup[index]

    # -- (de)serialisation ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("_by_index", None)
        d.pop("_lengths", None)
        d["tasks"] = [{"task_index": int(k), "task": v} for k, v in sorted(self.tasks.items())]
        # Put identity first for humans reading the file.
        head = {k: d.pop(k) for k in ("format", "format_version", "created_by")}
        return {**head, **d}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: Any, *, file: str = MANIFEST_NAME) -> Manifest:
        """Build a manifest from parsed JSON, checking every field's type (CompiledFormatError otherwise), so
        code reading a manifest never meets a string where it counts frames."""
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            raise CompiledFormatError(f"not a roboreel manifest (format={d.get('format')!r})"
                                      if isinstance(d, dict) else "not a roboreel manifest", file=file)
        version = d.get("format_version")
        if version != FORMAT_VERSION or isinstance(version, bool):
            raise CompiledFormatError(
                f"manifest format_version {version!r} is not supported by this roboreel (reads version "
                f"{FORMAT_VERSION}); upgrade roboreel or recompile",
                file=file,
            )
        try:
            tasks = d["tasks"]
            if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
                raise TypeError(f"tasks must be a list of {{task_index, task}} objects, got {tasks!r:.200}")
            for t in tasks:
                _check_value(t["task_index"], "int", "tasks[].task_index")
                _check_value(t["task"], "str", "tasks[].task")
            m = cls(
                fps=d["fps"],
                features={k: _obj(v, f"features[{k!r}]") for k, v in _obj(d["features"], "features").items()},
                cameras=[CameraSpec(**_obj(c, "cameras[]")) for c in _list(d["cameras"], "cameras")],
                tasks={t["task_index"]: t["task"] for t in tasks},
                shards=[ShardEntry(**_obj(s, "shards[]")) for s in _list(d["shards"], "shards")],
                episodes=[
                    EpisodeEntry(**{**_obj(e, "episodes[]"), "members": [
                        MemberInfo(**_obj(x, "episodes[].members[]")) for x in _list(e["members"], "members")]})
                    for e in _list(d["episodes"], "episodes")
                ],
                source=d.get("source", {}),
                settings=d.get("settings", {}),
                created_by=d.get("created_by", ""),
            )
            _check_fields(m, "manifest")
        except (KeyError, TypeError, ValueError) as e:
            raise CompiledFormatError(f"malformed manifest: {e!r}", file=file) from e
        if m.fps <= 0:
            raise CompiledFormatError(f"malformed manifest: fps must be positive, got {m.fps}", file=file)
        return m

    @classmethod
    def from_json(cls, text: str | bytes, *, file: str = MANIFEST_NAME) -> Manifest:
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
            raise CompiledFormatError(f"manifest is not valid JSON: {e}", file=file) from e
        return cls.from_dict(d, file=file)


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
    """Read ``roboreel.json`` from a compiled dataset root (local path or fsspec URL)."""
    fs, root = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
    path = root.rstrip("/") + "/" + MANIFEST_NAME
    try:
        with fs.open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError as e:
        raise CompiledFormatError("no manifest: not a compiled roboreel dataset, or compile has not finished",
                                  file=path) from e
    return Manifest.from_json(text, file=path)


def write_manifest(root: str | os.PathLike[str], manifest: Manifest) -> None:
    """Write ``roboreel.json`` atomically into a local compiled dataset root."""
    atomic_write_bytes(os.path.join(os.fspath(root), MANIFEST_NAME), manifest.to_json().encode())
