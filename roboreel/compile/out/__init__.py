"""The OUT folder: where everything goes (``paths``), the compile record, file locks, atomic writes and tars,
what ``.roboreel-parts`` holds, and an update's transition between compile generations."""

from roboreel.compile.out import paths
from roboreel.compile.out._locks import out_lock, run_lock
from roboreel.compile.out._pack import ShardWriter, atomic_write, remove_stale_temps
from roboreel.compile.out._parts import (
    clip_done,
    entry_from_dict,
    read_clip,
    read_reused,
    remove_clips,
    remove_clips_dir,
    shard_done,
    sweep_clip_temps,
    sweep_temps,
)
from roboreel.compile.out._record import (
    check_source_files,
    finished_changed,
    is_compile_dir,
    make_record,
    prepare_out,
    read_record,
    record_mismatch,
    snapshot_source,
    write_snapshot,
)
from roboreel.compile.out._update import (
    begin_update,
    generation,
    plan_update,
    read_state,
    remove_unused,
    reuse_for,
    transition_lock,
)

__all__ = ["ShardWriter", "atomic_write", "begin_update", "check_source_files", "clip_done", "entry_from_dict",
           "finished_changed", "generation", "is_compile_dir", "make_record", "out_lock", "paths", "plan_update",
           "prepare_out", "read_clip", "read_record", "read_reused", "read_state", "record_mismatch", "remove_clips",
           "remove_clips_dir", "remove_stale_temps", "remove_unused", "reuse_for", "run_lock", "shard_done",
           "snapshot_source", "sweep_clip_temps", "sweep_temps", "transition_lock", "write_snapshot"]
