"""The compiled dataset's index, ``roboreel.json``: what is where, and how to check it.

Written last (temp name + rename) by the compiler, so its presence means the dataset is complete. Readers
refuse unknown format versions instead of guessing.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

import fsspec

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
        d["tasks"] = [{"task_index": int(k), "task": v} for k, v in sorted(self.tasks.items())]
        # Put identity first for humans reading the file.
        head = {k: d.pop(k) for k in ("format", "format_version", "created_by")}
        return {**head, **d}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: Any, *, file: str = MANIFEST_NAME) -> Manifest:
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            raise CompiledFormatError(f"not a roboreel manifest (format={d.get('format')!r})"
                                      if isinstance(d, dict) else "not a roboreel manifest", file=file)
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            raise CompiledFormatError(
                f"manifest format_version {version!r} is not supported by this roboreel (reads version "
                f"{FORMAT_VERSION}); upgrade roboreel or recompile",
                file=file,
            )
        try:
            return cls(
                fps=int(d["fps"]),
                features=dict(d["features"]),
                cameras=[CameraSpec(**c) for c in d["cameras"]],
                tasks={int(t["task_index"]): str(t["task"]) for t in d["tasks"]},
                shards=[ShardEntry(**s) for s in d["shards"]],
                episodes=[
                    EpisodeEntry(**{**e, "members": [MemberInfo(**m) for m in e["members"]]}) for e in d["episodes"]
                ],
                source=dict(d.get("source", {})),
                settings=dict(d.get("settings", {})),
                created_by=str(d.get("created_by", "")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CompiledFormatError(f"malformed manifest: {e!r}", file=file) from e

    @classmethod
    def from_json(cls, text: str | bytes, *, file: str = MANIFEST_NAME) -> Manifest:
        try:
            d = json.loads(text)
        except ValueError as e:
            raise CompiledFormatError(f"manifest is not valid JSON: {e}", file=file) from e
        return cls.from_dict(d, file=file)


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


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a local file under a temp name in the same directory, fsync, then rename over ``path``."""
    path = os.fspath(path)
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the file is for everyone who may read the dataset
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_manifest(root: str | os.PathLike[str], manifest: Manifest) -> None:
    """Write ``roboreel.json`` atomically into a local compiled dataset root."""
    atomic_write_bytes(os.path.join(os.fspath(root), MANIFEST_NAME), manifest.to_json().encode())
