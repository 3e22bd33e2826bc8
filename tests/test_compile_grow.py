"""Compiling into an OUT that holds a compile of an earlier state of the source: unchanged episodes are reused,
new and changed ones compiled, and the result equals a fresh compile (shard bytes, meta/, data/, stats).

Growth is made the way LeRobot grows a dataset: a synthetic source of N + 3 episodes with the same seed holds the
first N episodes' video and data files unchanged, byte for byte, except the last files, which gained episodes
(as LeRobot's ``resume()`` appends). LeRobot's own ``resume()`` and episode deletion: tests/integration.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.settings import FAST

from roboreel.cli import main
from roboreel.compile import compile_dataset
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.manifest import load_manifest

TEST = FAST


def _src(root: Path, episodes: int, **kw) -> Path:
    from conftest import make_source

    return make_source(root, episodes=episodes, **kw)


def _files(root: Path, top: str) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / top).rglob("*")) if p.is_file()}


def assert_same_compile(got: Path, want: Path) -> None:
    """Equal in what a reader sees: the shards (bytes, in order), their episodes, meta/ and data/ byte for byte,
    the manifest's features, cameras, tasks and settings; and no file left over from an older compile."""
    a, b = load_manifest(str(got)), load_manifest(str(want))
    assert [s.sha256 for s in a.shards] == [s.sha256 for s in b.shards]
    assert [s.episodes for s in a.shards] == [s.episodes for s in b.shards]
    assert a.episodes == b.episodes
    for key in ("features", "cameras", "tasks", "settings", "fps"):
        assert getattr(a, key) == getattr(b, key), key
    assert _files(got, "meta") == _files(want, "meta")
    assert _files(got, "data") == _files(want, "data")
    assert len(_files(got, "shards")) == len(b.shards)  # nothing of the older generation is left
    index = {p for p in _files(got, "index")}
    assert index == {a.index_files["shards"]["path"], *(r["path"] for r in a.index_files["episodes"])}
    assert main(["validate", str(got)]) == 0


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """(old source of 4 episodes, grown source of 7, a fresh compile of the grown one)."""
    root = tmp_path_factory.mktemp("grow")
    old, new = _src(root / "old", 4), _src(root / "new", 7)
    fresh = root / "fresh"
    compile_dataset(str(new), str(fresh), settings=TEST, workers=1)
    return old, new, fresh


@pytest.fixture(scope="module")
def old_compiled(grown, tmp_path_factory) -> Path:
    """The old source compiled with TEST (read-only): tests that update it copy it (``_copy_of_old``)."""
    out = tmp_path_factory.mktemp("grow-old") / "out"
    compile_dataset(str(grown[0]), str(out), settings=TEST, workers=1)
    return out


def _copy_of_old(old_compiled: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(old_compiled, out)
    return out


def _unchanged_files(a: Path, b: Path) -> set[str]:
    fa, fb = _files(a, "videos") | _files(a, "data"), _files(b, "videos") | _files(b, "data")
    return {k for k in fa if fb.get(k) == fa[k]}


def test_grown_source_reuses_unchanged_episodes_and_equals_fresh(grown, tmp_path):
    old, new, fresh = grown
    assert "data/chunk-000/file-000.parquet" in _unchanged_files(old, new)  # growth kept earlier files
    out = tmp_path / "out"
    first = compile_dataset(str(old), str(out), settings=TEST, workers=1)
    assert (first.generation, first.episodes_compiled, first.episodes_reused) == (1, 4, 0)
    tars_before = {p.name: p.read_bytes() for p in (out / "shards").iterdir()}
    report = compile_dataset(str(new), str(out), settings=TEST, workers=1)
    assert report.generation == 2 and report.finalized
    # episodes 0-3 had their video files unchanged: their clips are copied, never decoded or encoded
    assert (report.episodes_reused, report.episodes_compiled) == (4, 3)
    assert report.clips_previous == 4 * 2 and report.clips_encoded + report.clips_remuxed == 3 * 2
    assert_same_compile(out, fresh)
    # shard 0 (episodes 0, 1: their data file unchanged) is kept byte for byte under its old name
    assert (out / "shards" / "shard-000000.tar").read_bytes() == tars_before["shard-000000.tar"]
    assert load_manifest(str(out)).source["generation"] == 2
    # the same command again: nothing to do, nothing changes
    again = compile_dataset(str(new), str(out), settings=TEST, workers=1)
    assert (again.shards_compiled, again.generation) == (0, 2)
    assert_same_compile(out, fresh)


def test_episode_changed_in_place(grown, tmp_path):
    """A data file's rows edited in place (same episodes) and one camera's video file replaced by another encode
    of the same frames: the episodes they hold are recompiled, the rest reused, the result equals a fresh
    compile of the edited source."""
    _, new, _ = grown
    src = tmp_path / "src"
    shutil.copytree(new, src)
    out = tmp_path / "out"
    compile_dataset(str(src), str(out), settings=TEST, workers=1)
    rel = "data/chunk-000/file-000.parquet"
    table = pq.read_table(src / rel)
    i = table.column_names.index("action")
    action = pa.array([[v + 1.0 for v in row] for row in table.column("action").to_pylist()],
                      type=table.schema.field("action").type)
    pq.write_table(table.set_column(i, "action", action), src / rel)
    other = _src(tmp_path / "other", 7, crf=40)  # the same frames at another CRF: other bytes, same spans
    video = "videos/observation.images.top/chunk-000/file-000.mp4"
    assert (other / video).read_bytes() != (src / video).read_bytes()
    shutil.copyfile(other / video, src / video)
    report = compile_dataset(str(src), str(out), settings=TEST, workers=1)
    fresh = tmp_path / "fresh"
    compile_dataset(str(src), str(fresh), settings=TEST, workers=1)
    assert_same_compile(out, fresh)
    assert report.episodes_compiled >= 1 and report.episodes_reused >= 1
    assert report.episodes_compiled + report.episodes_reused <= 7


def test_other_source_or_settings_still_refused(grown, old_compiled, tmp_path):
    old, _, _ = grown
    out = _copy_of_old(old_compiled, tmp_path)
    with pytest.raises(FileExistsError, match="different source or settings.*setting crf"):
        compile_dataset(str(old), str(out), settings=TEST.replace(crf=30), workers=1)
    other = _src(tmp_path / "other", 4, seed=5)  # another dataset of the same shape, elsewhere
    with pytest.raises(FileExistsError, match="different source or settings"):
        compile_dataset(str(other), str(out), settings=TEST, workers=1)
    assert load_manifest(str(out)).source["generation"] == 1


def test_reader_opened_before_an_update_fails_clearly_then_reopens(grown, old_compiled, tmp_path):
    from roboreel.reader.dataset import CompiledDataset

    old, new, fresh = grown
    out = _copy_of_old(old_compiled, tmp_path)
    before = CompiledDataset(str(out), seed=0)
    n_before = len(before)
    compile_dataset(str(new), str(out), settings=TEST, workers=1)
    with pytest.raises(CompiledFormatError, match="was updated by a new compile.*reopen the dataset"):
        for _ in before:
            pass
    after = CompiledDataset(str(out), seed=0)
    assert len(after) > n_before
    assert sum(1 for _ in after) == len(after)


def test_update_in_parts(grown, old_compiled, tmp_path):
    """``--part K/N`` jobs of an update, run one after the other (as a SLURM array may): the last finalizes."""
    old, new, fresh = grown
    out = _copy_of_old(old_compiled, tmp_path)
    a = compile_dataset(str(new), str(out), settings=TEST, workers=1, part=(1, 2))
    assert not a.finalized and load_manifest(str(out)).source["generation"] == 1  # old version still published
    b = compile_dataset(str(new), str(out), settings=TEST, workers=1, part=(0, 2))
    assert b.finalized
    assert_same_compile(out, fresh)


def test_cli_json_reports_reuse(grown, tmp_path, capsys):
    old, new, _ = grown
    out = tmp_path / "out"
    args = ["--no-progress", "--workers", "1", "--preset", "ultrafast", "--episodes-per-shard", "2"]
    assert main(["compile", str(old), str(out), *args]) == 0
    text = capsys.readouterr().out
    assert "CRF N" not in text and " N dB" not in text  # the summary keeps its numbers
    assert main(["compile", str(new), str(out), "--json", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["episodes"], doc["episodes_reused"], doc["episodes_compiled"], doc["generation"]) == (7, 4, 3, 2)
    assert doc["clips"]["from_previous_compile"] == 8
    assert doc["clips"]["encoded"] + doc["clips"]["copied"] == 6
    assert doc["bytes"]["out"] > 0 and doc["bytes"]["in"] > 0 and doc["psnr"]["min"] >= 40
    assert doc["finalized"] is True and doc["seconds"] >= 0


def test_update_of_a_transforming_compile(grown, tmp_path):
    """--fps and --resize: per-episode stats are recomputed from what was kept; an update carries the reused
    clips' stats over, so stats.json and meta/episodes equal a fresh compile's."""
    old, new, _ = grown
    settings = TEST.replace(fps=10, resize=(32, 48))
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    compile_dataset(str(old), str(out), settings=settings, workers=1)
    report = compile_dataset(str(new), str(out), settings=settings, workers=1)
    assert (report.episodes_reused, report.episodes_compiled) == (4, 3)
    compile_dataset(str(new), str(fresh), settings=settings, workers=1)
    assert_same_compile(out, fresh)


def test_update_by_concurrent_part_jobs(grown, old_compiled, tmp_path):
    """Two ``--part`` jobs of an update started together (a SLURM array): one makes the transition, both compile
    their blocks, the last publishes; equal to a fresh compile."""
    import subprocess
    import sys

    old, new, fresh = grown
    out = _copy_of_old(old_compiled, tmp_path)
    cmd = [sys.executable, "-m", "roboreel.cli", "compile", str(new), str(out), "--workers", "1", "--preset",
           "ultrafast", "--episodes-per-shard", "2", "--no-progress"]
    jobs = [subprocess.Popen([*cmd, "--part", f"{k}/2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for k in range(2)]
    results = [job.communicate(timeout=600) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], results
    if not (out / "roboreel.json").exists() or load_manifest(str(out)).source["generation"] != 2:
        assert main(["compile", "--finalize", str(out)]) == 0  # both ended before the other's last shard
    assert_same_compile(out, fresh)


def test_an_update_after_x265s_parameters_changed_recompiles_every_episode(grown, tmp_path, monkeypatch):
    """A roboreel that derives other x265 parameters from the same settings (here a shorter lookahead) makes other
    clips: its update of a grown source recompiles every episode instead of keeping clips of the old parameters
    beside new ones, and equals its own fresh compile."""
    from roboreel.compile import settings as settings_module

    old, new, _ = grown
    src, out = tmp_path / "src", tmp_path / "out"
    shutil.copytree(old, src)
    compile_dataset(str(src), str(out), settings=TEST, workers=1)
    shutil.copytree(new, src, dirs_exist_ok=True)  # grown in place, as LeRobot's resume() grows a dataset
    before = TEST.x265_params()
    monkeypatch.setitem(settings_module.X265_LOOKAHEAD, TEST.preset, 2)
    assert TEST.x265_params() != before
    report = compile_dataset(str(src), str(out), settings=TEST, workers=1)
    assert (report.generation, report.episodes_reused, report.episodes_compiled) == (2, 0, 7)
    fresh = tmp_path / "fresh"
    compile_dataset(str(src), str(fresh), settings=TEST, workers=1)
    assert_same_compile(out, fresh)


def test_a_same_size_edit_on_a_plain_http_server_is_recompiled(grown, tmp_path):
    """A plain static HTTP server (``http.server``: no ETag, a Last-Modified) and a data file edited in place at
    the same size: the rerun recompiles its episodes (identified by size and modification time) and equals a
    fresh compile of the edited source, instead of keeping the rows of the old version."""
    import os

    from support.plainhttp import serving

    _, new, _ = grown
    src = tmp_path / "src"
    shutil.copytree(new, src)
    rel = "data/chunk-000/file-000.parquet"
    table = pq.read_table(src / rel)
    plain = {"compression": "none", "use_dictionary": False}  # fixed-size float values: an edit keeps the size
    pq.write_table(table, src / rel, **plain)
    size = (src / rel).stat().st_size
    out = tmp_path / "out"
    with serving(src) as url:
        compile_dataset(url, str(out), settings=TEST, workers=1)
        i = table.column_names.index("action")
        action = pa.array([[v + 1.0 for v in row] for row in table.column("action").to_pylist()],
                          type=table.schema.field("action").type)
        pq.write_table(table.set_column(i, "action", action), src / rel, **plain)
        assert (src / rel).stat().st_size == size
        t = (src / rel).stat().st_mtime + 10  # Last-Modified counts whole seconds
        os.utime(src / rel, (t, t))
        report = compile_dataset(url, str(out), settings=TEST, workers=1)
    fresh = tmp_path / "fresh"
    compile_dataset(str(src), str(fresh), settings=TEST, workers=1)
    assert report.shards_compiled >= 1  # the edited file's shards: re-packed, rows read again, clips kept
    assert_same_compile(out, fresh)


def test_a_stats_json_the_source_dropped_is_dropped(grown, tmp_path):
    """A source whose meta/stats.json went away (deleted to be recomputed, or replaced by an edit that writes
    none) recompiled into the same OUT: OUT's stats.json goes too, as a fresh compile has none; the previous
    compile's stats stayed in meta/, so the reader and lerobot-train normalized with stats of another state."""
    src = tmp_path / "src"
    shutil.copytree(grown[0], src)
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    compile_dataset(str(src), str(out), settings=TEST, workers=1)
    assert (out / "meta/stats.json").exists()
    (src / "meta/stats.json").unlink()
    compile_dataset(str(src), str(out), settings=TEST, workers=1)
    compile_dataset(str(src), str(fresh), settings=TEST, workers=1)
    assert not (out / "meta/stats.json").exists()
    assert_same_compile(out, fresh)
