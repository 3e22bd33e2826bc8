"""What a failing compile leaves in OUT: only whole files that a later step may trust, in every situation (a
first compile, a resumed one, a process pool), and a rerun after fixing the source finishes the job."""

from __future__ import annotations

import shutil

import pytest
from support.settings import FAST

from roboreel.compile import compile_dataset
from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import MANIFEST_NAME, load_manifest
from roboreel.validate import validate

from . import damage as D
from .trees import assert_same_tree, temp_files, trusted_files_are_whole

TEST = FAST  # 2 episodes per shard: small_source gives shards [0,1] [2,3] [4,5] [6,7]


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


def test_a_source_file_edited_in_place_under_a_finished_shard_is_recompiled(small_source, small_compiled, copy_of,
                                                                           tmp_path):
    """Same size, same fingerprint, other content: the content checksums catch it and the run becomes an update
    (docs/incremental.md) that recompiles what the file holds; here the edit broke the file, so the update stops
    naming file and episode; once the file is restored the same command finishes, equal to a plain compile."""
    root = copy_of(small_source, "src")
    out = tmp_path / "out"
    compile_dataset(str(root), str(out), settings=TEST, part=(0, 2))  # shards 0 and 1 done
    src = LeRobotSource(str(root))
    video = src.episode(0).videos[D.TOP].path  # read by shard 0
    pristine = (root / video).read_bytes()
    fault = D.garbage_mid_mp4(root, video=video)
    with pytest.raises(SourceError, match="cannot decode video|video skips frames") as err:
        compile_dataset(str(root), str(out), settings=TEST)
    assert (err.value.file, err.value.episode) == (video, fault.episode)
    assert trusted_files_are_whole(out) == [] and temp_files(out) == []
    (root / video).write_bytes(pristine)
    again = compile_dataset(str(root), str(out), settings=TEST)
    assert again.finalized and again.generation == 2
    got, want = load_manifest(str(out)), load_manifest(str(small_compiled))
    assert [s.sha256 for s in got.shards] == [s.sha256 for s in want.shards]
    assert validate(str(out)).exit_code == 0


def test_the_manifest_records_the_source_files_checksums(small_source, small_compiled):
    import hashlib
    import json

    files = json.loads((small_compiled / MANIFEST_NAME).read_text())["source"]["files"]
    src = LeRobotSource(str(small_source))
    want = {p for e in src.episodes for p in (e.data_path, *(v.path for v in e.videos.values()))}
    assert set(files) == want
    for rel, f in files.items():
        data = (small_source / rel).read_bytes()
        assert f == {"size": len(data), "hash": "sha256:" + hashlib.sha256(data).hexdigest()}


def test_resume_recompiles_a_finished_shard_whose_bytes_rotted(small_source, small_compiled, copy_of, tmp_path):
    """A finished shard's sidecar records its sha256; a flipped byte (same size) makes resume redo the shard."""
    root = copy_of(small_source, "src")
    out = tmp_path / "out"
    compile_dataset(str(root), str(out), settings=TEST, part=(0, 2))
    tar = out / "shards" / "shard-000001.tar"
    data = bytearray(tar.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tar.write_bytes(bytes(data))
    again = compile_dataset(str(root), str(out), settings=TEST)
    assert (again.shards_skipped, again.shards_compiled, again.finalized) == (1, 3, True)
    assert_same_tree(out, small_compiled, ignore_source=True)


_FSIZE_SCRIPT = """
import resource, signal, sys
from roboreel.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
sys.exit(main(["compile", sys.argv[1], sys.argv[2], "--no-progress", "--workers", sys.argv[3],
               "--episodes-per-shard", "2", "--preset", "ultrafast"]))
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_compile_failing_with_an_os_error_keeps_whole_shards_and_says_so_in_one_line(small_source, small_compiled,
                                                                                       tmp_path, workers):
    """Not a RoboreelError (a full disk, here a file-size limit): one line explains, only whole files stay, and
    without the limit the same command resumes to the compile that never failed."""
    import subprocess
    import sys

    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-c", _FSIZE_SCRIPT, str(small_source), str(out), workers],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "compile stopped by OSError" in lines[0] and "File too large" in lines[0]
    assert f"finished shards and clips stay in {out}; a rerun resumes" in lines[0]
    assert temp_files(out) == [] and trusted_files_are_whole(out) == []
    from roboreel.cli import main

    args = ["--no-progress", "--workers", workers, "--episodes-per-shard", "2", "--preset", "ultrafast"]
    assert main(["compile", str(small_source), str(out), *args]) == 0
    assert_same_tree(out, small_compiled)  # the same settings, compiled in one go by the API
