"""Every path inside OUT, relative to OUT: the one module of compile/ that spells them (tests/test_layout.py).

What a reader sees (docs/format.md) is named by formats/ and only re-stated here; what only a compile uses
lives under ``.roboreel-parts/``, removed piece by piece as shards and the manifest are written::

    roboreel.json                       the manifest, written last (formats/manifest.py)
    .roboreel-compile.json              the compile record: source, settings, shard plan (_record.py)
    meta/ info.json, tasks.parquet, stats.json, episodes/chunk-000/file-000.parquet   (finalize.py)
    data/chunk-CCC/file-FFF.parquet     one per shard (tables/)
    shards/shard-SSSSSS[.gGGGGGG].tar   one per shard, generation-tagged after an update (_update.py)
    index/[gGGGGGG/]...                 the columnar index (formats/index_write.py)
    .roboreel-parts/
      shard-SSSSSS.json                 a shard's sidecar, written last: the shard is done (_parts.py)
      clips/shard-SSSSSS/EEEEEE.<camera>.mp4 + .json   clips until their shard is packed (jobs/)
      source/                           a byte copy of the source's meta/ (_record.py)
      update.json                       an update's reuse state (_update.py)
      run.lock, update.lock, finalize.lock   POSIX record locks (_locks.py)
"""

from __future__ import annotations

import re

from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.index import INDEX_DIR
from roboreel.formats.manifest import COMPILE_RECORD_NAME, MANIFEST_NAME
from roboreel.formats.shard import SHARD_DIR, shard_path

MANIFEST = MANIFEST_NAME
RECORD = COMPILE_RECORD_NAME
META_INFO, META_TASKS, META_STATS = v3.INFO_PATH, v3.TASKS_PATH, v3.STATS_PATH
META_EPISODES = v3.EPISODES_PATH.format(chunk_index=0, file_index=0)  # one file: the compiled episodes
DATA_DIR = "data"
DATA_PATH_TEMPLATE, VIDEO_PATH_TEMPLATE = v3.DEFAULT_DATA_PATH, v3.DEFAULT_VIDEO_PATH  # info.json's, as LeRobot's
SHARDS_DIR = SHARD_DIR

PARTS_DIR = ".roboreel-parts"
CLIPS_DIR = f"{PARTS_DIR}/clips"
SNAPSHOT_DIR = f"{PARTS_DIR}/source"
UPDATE_STATE = f"{PARTS_DIR}/update.json"
RUN_LOCK = f"{PARTS_DIR}/run.lock"
TRANSITION_LOCK = f"{PARTS_DIR}/update.lock"
FINALIZE_LOCK = f"{PARTS_DIR}/finalize.lock"

# the names an update's clean-up may remove (_update.remove_unused): roboreel's own, never a user's file
TAR_NAME = re.compile(r"shard-\d+(\.g\d+)?\.tar")
INDEX_FILE_NAME = re.compile(r"[\w.-]+\.parquet")
DATA_FILE_NAME = re.compile(r"file-\d+\.parquet")
SIDECAR_NAME = re.compile(r"shard-(\d+)\.json")


def tar_path(shard: int, generation: int = 1) -> str:
    """A shard's tar: ``shards/shard-000042.tar`` in a first compile, ``shards/shard-000042.g000003.tar`` when
    an update (_update.py) makes generation 3, so it never overwrites a tar the published manifest names."""
    base = shard_path(shard)
    return base if generation == 1 else f"{base[:-len('.tar')]}.g{generation:06d}.tar"


def data_path(shard: int, chunks_size: int) -> str:
    """The shard's data parquet, in LeRobot's layout: chunk = shard // chunks_size, file = shard % chunks_size."""
    return DATA_PATH_TEMPLATE.format(chunk_index=shard // chunks_size, file_index=shard % chunks_size)


def sidecar_path(shard: int) -> str:
    return f"{PARTS_DIR}/shard-{shard:06d}.json"


def shard_files(shard: int, chunks_size: int, generation: int = 1) -> tuple[str, str, str]:
    """(tar, data parquet, sidecar) of a shard."""
    return tar_path(shard, generation), data_path(shard, chunks_size), sidecar_path(shard)


def index_dir(generation: int) -> str:
    """Where generation ``generation``'s index goes: ``index`` for a first compile, ``index/g000002`` and so on
    after."""
    return INDEX_DIR if generation == 1 else f"{INDEX_DIR}/g{generation:06d}"


def clips_dir(shard: int) -> str:
    return f"{CLIPS_DIR}/shard-{shard:06d}"


def clip_paths(shard: int, episode: int, camera: str) -> tuple[str, str]:
    """(mp4, json) of a clip."""
    base = f"{clips_dir(shard)}/{episode:06d}.{camera}"
    return f"{base}.mp4", f"{base}.json"
