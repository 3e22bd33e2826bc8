"""What a failing compile leaves in OUT: only whole files that a later step may trust, in every situation (a
first compile, a resumed one, a process pool), and a rerun after fixing the source finishes the job."""

from __future__ import annotations

import shutil

import pytest

from roboreel.compile import CompileSettings, compile_dataset
from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import MANIFEST_NAME
from roboreel.validate import validate

from . import damage as D
from .trees import assert_same_tree, temp_files, trusted_files_are_whole

TEST = CompileSettings.for_tests()  # 2 episodes per shard: small_source gives shards [0,1] [2,3] [4,5] [6,7]


def test_failure_in_a_resumed_compile_keeps_only_whole_shards(small_source, small_compiled, copy_of, tmp_path):
    root = copy_of(small_source, "src")
    out = tmp_path / "out"
    first = compile_dataset(str(root), str(out), settings=TEST, part=(0, 2))  # shards 0 and 1 done
    assert (first.shards_compiled, first.finalized) == (2, False)
    src = LeRobotSource(str(root))
    video = src.episode(7).videos[D.TOP].path  # hosts episodes 6 and 7 only: shard 3
    pristine = (root / video).read_bytes()
    fault = D.garbage_mid_mp4(root, video=video)  # same size: same fingerprint, so the compile resumes
    with pytest.raises(SourceError) as err:
        compile_dataset(str(root), str(out), settings=TEST)
    assert (err.value.file, err.value.episode) == (video, fault.episode)
    # OUT was not fresh, so finished shards stay; nothing names the failed shard under a final name
    assert not (out / MANIFEST_NAME).exists()
    assert trusted_files_are_whole(out) == [] and temp_files(out) == []
    assert sorted(p.name for p in (out / "shards").iterdir()) == [f"shard-00000{i}.tar" for i in range(3)]
    (root / video).write_bytes(pristine)  # the user fixes the source and reruns
    again = compile_dataset(str(root), str(out), settings=TEST)
    assert (again.shards_skipped, again.shards_compiled, again.finalized) == (3, 1, True)
    assert_same_tree(out, small_compiled, ignore_source=True)
    assert validate(str(out)).exit_code == 0


def test_a_worker_failure_names_file_and_episode_and_removes_out(small_source, copy_of, tmp_path):
    """The error crosses the process pool with its type and attributes; OUT of a first compile is removed."""
    root = copy_of(small_source, "src")
    fault = D.garbage_mid_mp4(root)
    out = tmp_path / "out"
    with pytest.raises(SourceError, match="cannot decode video|video skips frames") as err:
        compile_dataset(str(root), str(out), settings=TEST, workers=2)
    assert (err.value.file, err.value.episode) == (fault.file, fault.episodes[0])
    assert not out.exists()


def test_recompiling_a_changed_source_in_one_process_reads_its_new_bytes(small_source, copy_of, tmp_path):
    """Inline jobs (workers=1) run in the caller's process: a compile must not reuse what an earlier compile
    of the same path read (that once finalized an OUT whose records contradicted its own meta/)."""
    root = copy_of(small_source, "src")
    compile_dataset(str(root), str(tmp_path / "first"), settings=TEST)
    D.meta_range_shifted(root)  # now every episode's range disagrees with the rows
    out = tmp_path / "second"
    try:
        with pytest.raises(SourceError, match="rows are not frames"):
            compile_dataset(str(root), str(out), settings=TEST)
    finally:
        if out.exists():
            shutil.rmtree(out)
