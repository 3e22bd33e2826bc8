"""``roboreel synth``: write a genuine LeRobot v3.0 dataset whose every frame and row says what it is.

Layout and encoding follow LeRobot's writer: AV1 (libsvtav1) yuv420p, g=2, crf=30; several episodes appended
per mp4 and per data parquet until a size limit, then the next file (so later episodes start at
from_timestamp > 0 and files roll over across chunks when ``chunks_size`` is small).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.formats import lerobot_v3_layout as v3
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


def _stats(values: np.ndarray) -> dict[str, list]:
    """LeRobot-style stats over axis 0 (values [N, ...])."""
    v = values.astype(np.float64)
    out = {"min": v.min(0), "max": v.max(0), "mean": v.mean(0), "std": v.std(0)}
    for q in (1, 10, 50, 90, 99):
        out[f"q{q:02d}"] = np.quantile(v, q / 100, axis=0)
    res = {k: np.atleast_1d(x).tolist() for k, x in out.items()}
    res["count"] = [int(v.shape[0])]
    return res


def _image_stats(frames: np.ndarray) -> dict[str, list]:
    """Per-channel stats of [N,H,W,3] uint8 frames in [0,1], shaped [3,1,1] like LeRobot's."""
    f = frames.astype(np.float32) / 255.0
    per = f.reshape(-1, 3)
    out = {"min": per.min(0), "max": per.max(0), "mean": per.mean(0), "std": per.std(0)}
    res = {k: x.reshape(3, 1, 1).tolist() for k, x in out.items()}
    res["count"] = [int(frames.shape[0])]
    return res


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
    if cfg.episodes <= 0 or cfg.min_length <= 0 or cfg.max_length < cfg.min_length:
        raise ValueError(f"need episodes > 0 and 0 < min_length <= max_length, got {cfg}")
    if len(cfg.cameras) > 15:
        raise ValueError("at most 15 cameras (pixel codes carry 4 camera bits)")
    if cfg.row_groups not in ("episode", "file"):
        raise ValueError(f"row_groups must be 'episode' or 'file', got {cfg.row_groups!r}")
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner to stderr otherwise
    root = Path(out)
    if root.exists():
        if not overwrite and any(root.iterdir()):
            raise FileExistsError(f"{root} exists and is not empty (pass overwrite=True / --overwrite)")
        shutil.rmtree(root)
    (root / "meta").mkdir(parents=True)
    tasks = [_TASKS[i % len(_TASKS)] + ("" if i < len(_TASKS) else f" #{i // len(_TASKS)}") for i in range(cfg.tasks)]
    _write_tasks(root, tasks)

    lengths = cfg.lengths()
    if cfg.depth_unit not in ("mm", "m"):
        raise ValueError(f"depth_unit must be 'mm' or 'm', got {cfg.depth_unit!r}")
    if set(cfg.depth_cameras) & set(cfg.cameras):
        raise ValueError("a camera cannot be both RGB and depth")
    videos = {key: VideoFileWriter(root, key, cfg) for key in cfg.cameras} if cfg.use_videos else {}
    videos |= {key: VideoFileWriter(root, key, cfg, depth=True) for key in cfg.depth_cameras}
    data_roll = Roller(cfg.chunks_size)
    data_pending: list[pa.Table] = []
    data_bytes = 0
    ep_rows: list[dict] = []
    all_tables: list[pa.Table] = []
    image_stats: dict[str, list[dict]] = {k: [] for k in (*cfg.cameras, *cfg.depth_cameras)}

    def flush_data() -> None:
        nonlocal data_pending, data_bytes
        if not data_pending:
            return
        path = root / v3.DEFAULT_DATA_PATH.format(chunk_index=data_roll.chunk, file_index=data_roll.file)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Like LeRobot (through HF datasets), every data file carries its own `huggingface` schema metadata
        # with a fingerprint of its own, so no two files' schemas are byte-equal.
        schema = data_pending[0].schema.with_metadata(hf_metadata(data_pending[0].schema, str(path.relative_to(root))))
        data_pending = [t.replace_schema_metadata(schema.metadata) for t in data_pending]
        if cfg.row_groups == "episode":
            with pq.ParquetWriter(path, schema) as w:
                for t in data_pending:
                    w.write_table(t, row_group_size=t.num_rows)
        else:
            t = pa.concat_tables(data_pending)
            pq.write_table(t, path, row_group_size=t.num_rows)
        data_pending, data_bytes = [], 0
        data_roll.next()

    start = 0
    it = range(cfg.episodes)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="synth", unit="ep")
    for ep in it:
        length, task_index = lengths[ep], ep % cfg.tasks
        rows = _rows(ep, start, length, task_index, cfg)
        row = {
            "episode_index": ep,
            "tasks": [tasks[task_index]],
            "length": length,
            "data/chunk_index": data_roll.chunk,
            "data/file_index": data_roll.file,
            "dataset_from_index": start,
            "dataset_to_index": start + length,
        }
        images: dict[str, pa.Array] = {}
        for cam_id, key in enumerate(cfg.cameras):
            frames = [render_frame(start + k, ep, cam_id, k, cfg.height, cfg.width) for k in range(length)]
            if not cfg.use_videos:
                images[key] = image_column(frames)
            else:
                chunk, file, t0, t1 = videos[key].add_episode(frames)
                row |= {
                    f"videos/{key}/chunk_index": chunk,
                    f"videos/{key}/file_index": file,
                    f"videos/{key}/from_timestamp": t0,
                    f"videos/{key}/to_timestamp": t1,
                }
            st = _image_stats(np.stack(frames[:: max(1, length // 8)]))
            image_stats[key].append(st)
            row |= {f"stats/{key}/{s}": v for s, v in st.items()}
        for key in cfg.depth_cameras:
            depth = [render_depth(start + k, cfg.height, cfg.width, cfg.depth_unit) for k in range(length)]
            chunk, file, t0, t1 = videos[key].add_episode([quantize(d) for d in depth])
            row |= {
                f"videos/{key}/chunk_index": chunk,
                f"videos/{key}/file_index": file,
                f"videos/{key}/from_timestamp": t0,
                f"videos/{key}/to_timestamp": t1,
            }
            st = depth_stats(np.stack(depth))
            image_stats[key].append(st)
            row |= {f"stats/{key}/{s}": v for s, v in st.items()}
        for key in ("observation.state", "action", "timestamp", "frame_index", "index"):
            col = rows.column(key)
            vals = np.stack(col.to_numpy(zero_copy_only=False)) if pa.types.is_fixed_size_list(col.type) else col.to_numpy()
            row |= {f"stats/{key}/{s}": v for s, v in _stats(vals.reshape(length, -1)).items()}
        row |= {"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
        ep_rows.append(row)
        # LeRobot's column order: info.json's features (image keys first here), language appended by annotate
        rows = pa.table({**images, **dict(zip(rows.column_names, rows.columns, strict=True)),
                         **(language_columns(ep, start, length, cfg.fps) if cfg.language else {})})
        all_tables.append(rows)
        data_pending.append(rows)
        data_bytes += rows.nbytes
        if data_bytes >= cfg.data_files_size_in_mb * 1e6:
            flush_data()
        start += length
    flush_data()
    for w in videos.values():
        w.close()

    ep_path = root / v3.EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(ep_rows), ep_path)

    everything = pa.concat_tables(all_tables)
    stats: dict = {}
    for key in ("observation.state", "action", "timestamp", "frame_index", "episode_index", "index", "task_index"):
        col = everything.column(key)
        vals = np.stack(col.to_numpy(zero_copy_only=False)) if pa.types.is_fixed_size_list(col.type) else col.to_numpy()
        stats[key] = _stats(vals.reshape(len(everything), -1))
    for key, per_ep in image_stats.items():
        n = np.array([s["count"][0] for s in per_ep], np.float64)
        mean = sum(np.array(s["mean"]) * c for s, c in zip(per_ep, n, strict=True)) / n.sum()  # pooled, as LeRobot
        stats[key] = {
            "min": np.min([s["min"] for s in per_ep], axis=0).tolist(),
            "max": np.max([s["max"] for s in per_ep], axis=0).tolist(),
            "mean": mean.tolist(),
            "std": np.sqrt(sum(np.array(s["std"]) ** 2 * c for s, c in zip(per_ep, n, strict=True)) / n.sum()).tolist(),
            "count": [int(n.sum())],
        }
    (root / v3.STATS_PATH).write_text(json.dumps(stats, indent=1))

    info = {
        "codebase_version": v3.CODEBASE_VERSION,
        "robot_type": cfg.robot_type,
        "total_episodes": cfg.episodes,
        "total_frames": start,
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
    (root / v3.INFO_PATH).write_text(json.dumps(info, indent=4))
    return SynthSummary(
        root=root,
        episodes=cfg.episodes,
        frames=start,
        video_files={k: w.files for k, w in videos.items()},
        data_files=data_roll.chunk * cfg.chunks_size + data_roll.file,
    )
