"""``roboreel synth``: write a genuine LeRobot v3.0 dataset whose every frame and row says what it is.

Layout and encoding follow LeRobot's writer: AV1 (libsvtav1) yuv420p, g=2, crf=30; several episodes appended
per mp4 and per data parquet until a size limit, then the next file (so later episodes start at
from_timestamp > 0 and files roll over across chunks when ``chunks_size`` is small).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.formats import lerobot_v3_layout as v3
from roboreel.synth._stats import column_stats, dataset_stats, rgb_stats
from roboreel.synth.config import ENCODERS, SynthConfig
from roboreel.synth.content import action_row, render_frame, state_row
from roboreel.synth.depth import depth_feature, depth_stats, quantize, render_depth
from roboreel.synth.tables import LANGUAGE_FEATURES, STRING_KEY, hf_metadata, image_column, language_columns
from roboreel.synth.videofile import Roller, VideoFileWriter

_TASKS = (
    "pick up the red cube",
    "place the cube in the bowl",
    "open the drawer",
    "push the button",
    "fold the towel",
    "stack the blocks",
)

@dataclass
class SynthSummary:
    root: Path
    episodes: int
    frames: int
    video_files: dict[str, int] = field(default_factory=dict)  # camera -> number of mp4 files
    data_files: int = 0


def _features(cfg: SynthConfig) -> dict:
    feats: dict = {}
    for key in cfg.cameras:
        if not cfg.use_videos:  # LeRobot's image feature: no video info
            feats[key] = {"dtype": "image", "shape": [cfg.height, cfg.width, 3],
                          "names": ["height", "width", "channels"]}
            continue
        feats[key] = {
            "dtype": "video",
            "shape": [cfg.height, cfg.width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": cfg.height,
                "video.width": cfg.width,
                "video.codec": {enc: codec for codec, enc in ENCODERS.items()}.get(cfg.codec, cfg.codec),
                "video.pix_fmt": cfg.pix_fmt,
                "video.is_depth_map": False,
                "video.fps": cfg.fps,
                "video.channels": 3,
                "video.g": cfg.g,
                "video.crf": cfg.crf,
                "has_audio": False,
            },
        }
    for key in cfg.depth_cameras:
        feats[key] = depth_feature(cfg.height, cfg.width, cfg.fps, cfg.depth_unit)
    feats["observation.state"] = {"dtype": "float32", "shape": [cfg.state_dim], "names": [f"j{i}" for i in range(cfg.state_dim)]}
    feats["action"] = {"dtype": "float32", "shape": [cfg.action_dim], "names": [f"j{i}" for i in range(cfg.action_dim)]}
    feats["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for k in ("frame_index", "episode_index", "index", "task_index"):
        feats[k] = {"dtype": "int64", "shape": [1], "names": None}
    if cfg.language:
        feats[STRING_KEY] = {"dtype": "string", "shape": [1], "names": None}
        feats |= LANGUAGE_FEATURES
    return feats


def _rows(ep: int, start: int, length: int, task_index: int, cfg: SynthConfig) -> pa.Table:
    idx = np.arange(start, start + length, dtype=np.int64)
    state = np.stack([state_row(int(i), cfg.state_dim) for i in idx])
    action = np.stack([action_row(int(i), cfg.action_dim) for i in idx])

    def vec(a: np.ndarray) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1), pa.float32()), a.shape[1])

    return pa.table(
        {
            "observation.state": vec(state),
            "action": vec(action),
            "timestamp": pa.array((np.arange(length) / cfg.fps).astype(np.float32)),
            "frame_index": pa.array(np.arange(length, dtype=np.int64)),
            "episode_index": pa.array(np.full(length, ep, np.int64)),
            "index": pa.array(idx),
            "task_index": pa.array(np.full(length, task_index, np.int64)),
        }
    )


def _write_tasks(root: Path, tasks: list[str]) -> None:
    # pandas writes the task string as the frame's index; keep that metadata so LeRobot's pd.read_parquet
    # sees tasks.index == task strings.
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    pq.write_table(table, root / v3.TASKS_PATH)


def synthesize(out: str | os.PathLike[str], config: SynthConfig | None = None, *, overwrite: bool = False,
               progress: bool = False) -> SynthSummary:
    """Write a LeRobot v3.0 dataset to ``out`` (a local directory). Deterministic for a given config."""
    cfg = config or SynthConfig()
    _check_config(cfg)
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner to stderr otherwise
    root = _fresh_root(Path(out), overwrite)
    tasks = _task_strings(cfg.tasks)
    _write_tasks(root, tasks)
    lengths = cfg.lengths()
    _check_depth(cfg)
    run = _Run(root, cfg, tasks, _video_writers(root, cfg), _DataFiles(root, cfg, Roller(cfg.chunks_size)),
               image_stats={k: [] for k in (*cfg.cameras, *cfg.depth_cameras)})
    start = 0
    for ep in _with_progress(range(cfg.episodes), progress):
        _write_episode(run, _Episode(ep, start, lengths[ep], ep % cfg.tasks))
        start += lengths[ep]
    run.data.flush()
    for w in run.videos.values():
        w.close()
    _write_episodes_meta(root, run.ep_rows)
    (root / v3.STATS_PATH).write_text(json.dumps(dataset_stats(run.tables, run.image_stats), indent=1))
    (root / v3.INFO_PATH).write_text(json.dumps(_info(cfg, start), indent=4))
    return SynthSummary(
        root=root,
        episodes=cfg.episodes,
        frames=start,
        video_files={k: w.files for k, w in run.videos.items()},
        data_files=run.data.roll.chunk * cfg.chunks_size + run.data.roll.file,
    )


def _check_config(cfg: SynthConfig) -> None:
    """Refuse a config the layout cannot hold, before anything in ``out`` is touched."""
    if cfg.episodes <= 0 or cfg.min_length <= 0 or cfg.max_length < cfg.min_length:
        raise ValueError(f"need episodes > 0 and 0 < min_length <= max_length, got {cfg}")
    if len(cfg.cameras) > 15:
        raise ValueError("at most 15 cameras (pixel codes carry 4 camera bits)")
    if cfg.row_groups not in ("episode", "file"):
        raise ValueError(f"row_groups must be 'episode' or 'file', got {cfg.row_groups!r}")


def _check_depth(cfg: SynthConfig) -> None:
    """Refuse a depth setup the writers cannot encode. ``synthesize`` checks it after writing
    ``meta/tasks.parquet``, so a refused depth config leaves ``out`` holding just that."""
    if cfg.depth_unit not in ("mm", "m"):
        raise ValueError(f"depth_unit must be 'mm' or 'm', got {cfg.depth_unit!r}")
    if set(cfg.depth_cameras) & set(cfg.cameras):
        raise ValueError("a camera cannot be both RGB and depth")


def _fresh_root(root: Path, overwrite: bool) -> Path:
    """An empty dataset directory with its ``meta/``: a non-empty one is replaced only when asked to."""
    if root.exists():
        if not overwrite and any(root.iterdir()):
            raise FileExistsError(f"{root} exists and is not empty (pass overwrite=True / --overwrite)")
        shutil.rmtree(root)
    (root / "meta").mkdir(parents=True)
    return root


def _task_strings(n: int) -> list[str]:
    """``n`` distinct task strings: the stock phrases, then the same ones numbered (``... #1``) past them."""
    return [_TASKS[i % len(_TASKS)] + ("" if i < len(_TASKS) else f" #{i // len(_TASKS)}") for i in range(n)]


def _video_writers(root: Path, cfg: SynthConfig) -> dict[str, VideoFileWriter]:
    """One mp4 writer per video camera: RGB cameras (unless they are image features), then depth cameras."""
    videos = {key: VideoFileWriter(root, key, cfg) for key in cfg.cameras} if cfg.use_videos else {}
    videos |= {key: VideoFileWriter(root, key, cfg, depth=True) for key in cfg.depth_cameras}
    return videos


def _with_progress(episodes: range, progress: bool) -> Iterable[int]:
    """The episode indices, behind a tqdm bar when asked (tqdm imported only then)."""
    if not progress:
        return episodes
    from tqdm import tqdm

    return tqdm(episodes, desc="synth", unit="ep")


@dataclass
class _DataFiles:
    """The data parquet files: episodes' tables wait in ``pending`` until they pass the size limit, then go out
    as one file at the roller's place, and the roller moves on."""

    root: Path
    cfg: SynthConfig
    roll: Roller
    pending: list[pa.Table] = field(default_factory=list)
    nbytes: int = 0

    def add(self, table: pa.Table) -> None:
        """Queue one episode's table; write the file once the queue reaches ``data_files_size_in_mb``."""
        self.pending.append(table)
        self.nbytes += table.nbytes
        if self.nbytes >= self.cfg.data_files_size_in_mb * 1e6:
            self.flush()

    def flush(self) -> None:
        """Write the queued tables as the current data file (nothing when none are queued)."""
        if not self.pending:
            return
        path = self.root / v3.DEFAULT_DATA_PATH.format(chunk_index=self.roll.chunk, file_index=self.roll.file)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Like LeRobot (through HF datasets), every data file carries its own `huggingface` schema metadata
        # with a fingerprint of its own, so no two files' schemas are byte-equal.
        first = self.pending[0].schema
        schema = first.with_metadata(hf_metadata(first, str(path.relative_to(self.root))))
        pending = [t.replace_schema_metadata(schema.metadata) for t in self.pending]
        if self.cfg.row_groups == "episode":
            with pq.ParquetWriter(path, schema) as w:
                for t in pending:
                    w.write_table(t, row_group_size=t.num_rows)
        else:
            t = pa.concat_tables(pending)
            pq.write_table(t, path, row_group_size=t.num_rows)
        self.pending, self.nbytes = [], 0
        self.roll.next()


@dataclass
class _Run:
    """What one ``synthesize`` call writes to and gathers across episodes."""

    root: Path
    cfg: SynthConfig
    tasks: list[str]
    videos: dict[str, VideoFileWriter]
    data: _DataFiles
    ep_rows: list[dict] = field(default_factory=list)  # meta/episodes rows
    tables: list[pa.Table] = field(default_factory=list)  # every episode's data table, for the dataset's stats
    image_stats: dict[str, list[dict]] = field(default_factory=dict)  # camera -> per-episode stats


@dataclass(frozen=True)
class _Episode:
    """One episode's place: its index, first global frame index, length and task."""

    index: int
    start: int
    length: int
    task_index: int


def _write_episode(run: _Run, ep: _Episode) -> None:
    """Encode one episode's cameras, queue its data table and record its meta/episodes row."""
    cfg = run.cfg
    rows = _rows(ep.index, ep.start, ep.length, ep.task_index, cfg)
    row = {
        "episode_index": ep.index,
        "tasks": [run.tasks[ep.task_index]],
        "length": ep.length,
        "data/chunk_index": run.data.roll.chunk,
        "data/file_index": run.data.roll.file,
        "dataset_from_index": ep.start,
        "dataset_to_index": ep.start + ep.length,
    }
    images: dict[str, pa.Array] = {}
    for cam_id, key in enumerate(cfg.cameras):
        columns, image = _camera_episode(run, ep, cam_id, key)
        row |= columns
        if image is not None:
            images[key] = image
    for key in cfg.depth_cameras:
        row |= _depth_episode(run, ep, key)
    keys = ("observation.state", "action", "timestamp", "frame_index", "index")
    row |= {f"stats/{key}/{s}": v for key, st in column_stats(rows, keys).items() for s, v in st.items()}
    row |= {"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
    run.ep_rows.append(row)
    # LeRobot's column order: info.json's features (image keys first here), language appended by annotate
    table = pa.table({**images, **dict(zip(rows.column_names, rows.columns, strict=True)),
                      **(language_columns(ep.index, ep.start, ep.length, cfg.fps) if cfg.language else {})})
    run.tables.append(table)
    run.data.add(table)


def _camera_episode(run: _Run, ep: _Episode, cam_id: int, key: str) -> tuple[dict, pa.Array | None]:
    """One RGB camera's frames of an episode, encoded into its mp4 (or, for image features, returned as the
    PNG column); gives its meta/episodes columns (video span, stats) and that column or None."""
    cfg = run.cfg
    frames = [render_frame(ep.start + k, ep.index, cam_id, k, cfg.height, cfg.width) for k in range(ep.length)]
    columns: dict = {}
    image = None
    if not cfg.use_videos:
        image = image_column(frames)
    else:
        columns |= _video_columns(key, run.videos[key].add_episode(frames))
    st = rgb_stats(np.stack(frames[:: max(1, ep.length // 8)]))  # over every ~8th frame
    run.image_stats[key].append(st)
    return columns | {f"stats/{key}/{s}": v for s, v in st.items()}, image


def _depth_episode(run: _Run, ep: _Episode, key: str) -> dict:
    """One depth camera's frames of an episode, quantized into its mp4; gives its meta/episodes columns."""
    cfg = run.cfg
    depth = [render_depth(ep.start + k, cfg.height, cfg.width, cfg.depth_unit) for k in range(ep.length)]
    columns = _video_columns(key, run.videos[key].add_episode([quantize(d) for d in depth]))
    st = depth_stats(np.stack(depth))
    run.image_stats[key].append(st)
    return columns | {f"stats/{key}/{s}": v for s, v in st.items()}


def _video_columns(key: str, span: tuple[int, int, float, float]) -> dict:
    """Where an episode of camera ``key`` lies: meta/episodes' four ``videos/{key}/...`` columns."""
    chunk, file, t0, t1 = span
    return {
        f"videos/{key}/chunk_index": chunk,
        f"videos/{key}/file_index": file,
        f"videos/{key}/from_timestamp": t0,
        f"videos/{key}/to_timestamp": t1,
    }


def _write_episodes_meta(root: Path, ep_rows: list[dict]) -> None:
    """meta/episodes: every episode's row in one parquet file (chunk 0, file 0)."""
    ep_path = root / v3.EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(ep_rows), ep_path)


def _info(cfg: SynthConfig, frames: int) -> dict:
    """meta/info.json of a dataset of ``frames`` frames."""
    return {
        "codebase_version": v3.CODEBASE_VERSION,
        "robot_type": cfg.robot_type,
        "total_episodes": cfg.episodes,
        "total_frames": frames,
        "total_tasks": cfg.tasks,
        "chunks_size": cfg.chunks_size,
        "data_files_size_in_mb": cfg.data_files_size_in_mb,
        "video_files_size_in_mb": cfg.video_files_size_in_mb,
        "fps": cfg.fps,
        "splits": {"train": f"0:{cfg.episodes}"},
        "data_path": v3.DEFAULT_DATA_PATH,
        "video_path": v3.DEFAULT_VIDEO_PATH if (cfg.cameras and cfg.use_videos) or cfg.depth_cameras else None,
        "features": _features(cfg),
    }
