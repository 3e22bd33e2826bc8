"""LeRobot v3.0's layout and metadata records: where a dataset's files live, which columns meta/episodes
carries, and what meta/ parses into (``SourceInfo`` from info.json, checked; ``EpisodeMeta`` and ``VideoSpan``
per row of meta/episodes).

Separate from lerobot_v3.py (``LeRobotSource``, which reads these through fsspec, with retries) because this part
is pure, no filesystem and no I/O: the synthetic writer (synth/) and the checks (validate/) need the layout, not
the reader. Layout and column names follow LeRobot's writer (see docs/format.md).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from roboreel.formats.errors import SourceError

CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = EPISODES_DIR + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
# Columns every meta/episodes file has (besides data/* and, per camera, videos/<key>/*)
EPISODE_COLUMNS = ("episode_index", "length", "dataset_from_index", "dataset_to_index")
TIMESTAMP_TOLERANCE_S = 1e-4  # LeRobot's default tolerance between a row's timestamp and its frame's pts


# LeRobot 0.6.1's own converter (lerobot/scripts/convert_dataset_v21_to_v30.py; the command LeRobot's
# BackwardCompatibilityError prints, lerobot/datasets/utils.py V30_MESSAGE). It converts v2.1 only.
CONVERT_V21_COMMAND = ("python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=<repo_id> "
                       "--root=<dataset dir> --push-to-hub=false")


def numbered_episode_files(chunks_size: int, present: Callable[[str], bool]) -> list[str]:
    """The meta/episodes files a store holds, found by LeRobot's numbering where it cannot list them (a plain
    HTTP server): file_index counts up and wraps at ``chunks_size`` into the next chunk; the first file
    ``present`` says is missing ends the walk."""
    out: list[str] = []
    chunk = file = 0
    while present(rel := EPISODES_PATH.format(chunk_index=chunk, file_index=file)):
        out.append(rel)
        file += 1
        if file >= chunks_size:
            chunk, file = chunk + 1, 0
    return out


def version_message(version: Any) -> str:
    """Why a dataset of another ``codebase_version`` is refused, and for LeRobot v2.x what converts it."""
    head = f"codebase_version {version!r}: roboreel reads LeRobot {CODEBASE_VERSION} datasets"
    text = str(version)
    if text.startswith("v2.1"):
        return f"{head}; convert this v2.1 dataset with LeRobot's own converter: {CONVERT_V21_COMMAND}"
    if text.startswith("v2"):
        return (f"{head}; LeRobot's converter to v3.0 reads v2.1, so bring this {text} dataset to v2.1 with the "
                f"LeRobot release that converts v2.0 to v2.1, then run: {CONVERT_V21_COMMAND}")
    return head


@dataclass(frozen=True)
class VideoSpan:
    """Where one camera's frames of one episode live: a (shared) mp4 and a [from, to) time span in it."""

    key: str
    path: str  # relative to the dataset root
    from_timestamp: float
    to_timestamp: float


@dataclass(frozen=True)
class EpisodeMeta:
    """One row of meta/episodes: an episode's frames, its data file and its video spans."""

    index: int
    length: int
    tasks: tuple[str, ...]
    data_path: str  # relative to the dataset root
    from_index: int  # global frame index of the first frame (dataset_from_index)
    to_index: int  # one past the last (dataset_to_index)
    videos: dict[str, VideoSpan] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceInfo:
    """meta/info.json, checked: the parts roboreel relies on, plus the raw dict to carry through."""

    raw: dict[str, Any]
    fps: int
    features: dict[str, dict[str, Any]]
    data_path: str
    video_path: str | None

    @classmethod
    def from_dict(cls, raw: Any, *, file: str = INFO_PATH) -> SourceInfo:
        if not isinstance(raw, dict):
            raise SourceError("info.json is not a JSON object", file=file)
        version = raw.get("codebase_version")
        if version != CODEBASE_VERSION:
            raise SourceError(version_message(version), file=file)
        for key in ("fps", "features"):
            if key not in raw:
                raise SourceError(f"info.json has no {key!r}", file=file)
        fps = raw["fps"]
        if not isinstance(fps, int | float) or fps <= 0 or int(fps) != fps:
            raise SourceError(f"fps must be a positive integer, got {fps!r}", file=file)
        for key in ("chunks_size", "data_files_size_in_mb", "video_files_size_in_mb"):  # LeRobot's DatasetInfo
            value = raw.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise SourceError(f"{key} must be a positive number, got {value!r} (LeRobot refuses it too)",
                                  file=file)
        features = raw["features"]
        if not isinstance(features, dict):
            raise SourceError("info.json 'features' is not an object", file=file)
        return cls(
            raw=raw,
            fps=int(fps),
            features=features,
            data_path=raw.get("data_path") or DEFAULT_DATA_PATH,
            video_path=raw.get("video_path"),
        )

    @property
    def camera_keys(self) -> list[str]:
        """Video features, in info.json order (LeRobot's order)."""
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]

    @property
    def tabular_keys(self) -> list[str]:
        """Features stored in the data parquet."""
        return [k for k, f in self.features.items() if f.get("dtype") != "video"]
