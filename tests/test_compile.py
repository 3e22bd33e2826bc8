"""roboreel compile: round trip on real AV1/HEVC/H.264 sources, checked frame by frame with pixel codes."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from support.compiled import assert_same_tree, read_records, tree
from support.settings import FAST
from torchcodec.decoders import VideoDecoder

from roboreel.compile import CompileSettings, compile_dataset, finalize
from roboreel.compile.report import CompileReport
from roboreel.compile.tables import episode_row_groups
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import load_manifest
from roboreel.formats.shard import EpisodeRecord, rows_digest, sha256_hex, shard_path
from roboreel.synth import FrameCode, read

TEST = FAST


# -- round trip ------------------------------------------------------------------------------------------
def test_every_clip_frame_is_its_episode_frame(small_source, small_compiled):
    src = LeRobotSource(str(small_source))
    # the source exercises rolled-over mp4s: episodes starting mid-file, files in a second chunk dir
    assert any(e.videos["observation.images.top"].from_timestamp > 0 for e in src.episodes)
    assert any("chunk-001" in e.videos["observation.images.wrist"].path for e in src.episodes)
    records = read_records(small_compiled)
    assert sorted(records) == [e.index for e in src.episodes]
    for e in src.episodes:
        rec = records[e.index]
        assert sorted(rec.clips) == src.camera_keys
        for cam_id, cam in enumerate(src.camera_keys):
            dec = VideoDecoder(rec.clips[cam])
            assert len(dec) == e.length
            frames = dec.get_frames_in_range(0, e.length)
            assert np.allclose(frames.pts_seconds.numpy(), np.arange(e.length) / src.fps, atol=1e-6)
            assert [read(f) for f in frames.data] == [
                FrameCode(e.from_index + k, e.index, cam_id) for k in range(e.length)
            ]
            spec = rec.meta["cameras"][cam]
            assert spec == {"codec": "hevc", "frames": e.length, "height": 64, "width": 64, "gop": TEST.gop,
                            "bframes": 0, "pix_fmt": "yuv420p", "lossless": False}
        assert rec.meta["length"] == e.length and rec.meta["tasks"] == list(e.tasks)
        assert (rec.meta["dataset_from_index"], rec.meta["dataset_to_index"]) == (e.from_index, e.to_index)
        assert rec.meta["fps"] == src.fps and rec.meta["episode_index"] == e.index


def test_clips_are_hevc_main_hvc1_closed_gop(small_compiled):
    import av

    rec = read_records(small_compiled)[1]
    with av.open(io.BytesIO(rec.clips["observation.images.top"])) as c:
        s = c.streams.video[0]
        assert (s.codec_context.name, s.codec_tag, s.codec_context.profile) == ("hevc", "hvc1", "Main")
        assert s.codec_context.pix_fmt == "yuv420p"
        packets = [p for p in c.demux(s) if p.size]
    keyframes = [i for i, p in enumerate(packets) if p.is_keyframe]
    assert keyframes == list(range(0, len(packets), TEST.gop))
    assert [p.pts for p in packets] == sorted(p.pts for p in packets)  # no B-frames: decode order = display order


def test_rows_bit_identical_and_one_row_group_per_episode(small_source, small_compiled):
    src = LeRobotSource(str(small_source))
    manifest = load_manifest(str(small_compiled))
    records = read_records(small_compiled)
    compiled_rows = []
    for e in src.episodes:
        source_rows = src.episode_rows(e)
        rows = records[e.index].rows
        assert rows.schema.equals(source_rows.schema, check_metadata=False)
        assert rows.equals(source_rows)
        assert manifest.episode(e.index).rows_sha256 == rows_digest(rows) == rows_digest(source_rows)
    data_files = sorted((small_compiled / "data").rglob("*.parquet"))
    assert len(data_files) == len(manifest.shards)  # one data file per shard, chunks rolled by chunks_size
    assert any("chunk-001" in str(p) for p in data_files)
    for p in data_files:
        groups = episode_row_groups(str(p))
        assert all(len(g) == 1 for g in groups)
        compiled_rows.append(pq.read_table(p))
    every = pa.concat_tables(compiled_rows)
    source_all = pa.concat_tables([src.episode_rows(e) for e in src.episodes])
    assert every.equals(source_all)
    assert [g[0] for p in data_files for g in episode_row_groups(str(p))] == [e.index for e in src.episodes]


def test_manifest_members_checksums_and_meta(small_source, small_compiled):
    src = LeRobotSource(str(small_source))
    m = load_manifest(str(small_compiled))
    assert m.fps == src.fps and m.camera_keys == src.camera_keys and m.tasks == src.tasks
    assert m.source["fingerprint"] == src.fingerprint() and m.settings["crf"] == TEST.crf
    assert len(m.shards) == 4 and [s.path for s in m.shards] == [shard_path(i) for i in range(4)]
    for s in m.shards:
        data = (small_compiled / s.path).read_bytes()
        assert (len(data), sha256_hex(data)) == (s.size, s.sha256)
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            members = {mem.name: t.extractfile(mem).read() for mem in t.getmembers()}
            assert all(mem.mtime == 0 and mem.uname == "roboreel" for mem in t.getmembers())
        for ep in s.episodes:
            entry = m.episode(ep)
            assert entry.shard == m.shards.index(s)
            for mi in entry.members:
                assert (len(members[mi.name]), sha256_hex(members[mi.name])) == (mi.size, mi.sha256)
    # LeRobot v3 meta/ describes the compiled data
    info = json.loads((small_compiled / "meta/info.json").read_text())
    assert info["total_episodes"] == 8 and info["total_frames"] == m.total_frames
    assert all(info["features"][c]["info"]["video.codec"] == "hevc" for c in src.camera_keys)
    for c in src.camera_keys:  # the encoder keys describe the x265 encode, not the source's encoder
        cam = info["features"][c]["info"]
        assert (cam["video.preset"], cam["video.crf"], cam["video.g"]) == (
            m.settings["preset"], m.settings["crf"], m.settings["gop"])
        assert cam["video.extra_options"] == {"x265-params": m.settings["x265_params"][c]}
    eps = pq.read_table(small_compiled / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for row, e in zip(eps, src.episodes, strict=True):
        assert row["episode_index"] == e.index and row["roboreel/shard"] == m.episode(e.index).shard
        shard = row["roboreel/shard"]
        rel = info["data_path"].format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])
        assert pq.read_table(small_compiled / rel).column("episode_index").to_pylist().count(e.index) == e.length
        assert rel == f"data/chunk-{shard // 2:03d}/file-{shard % 2:03d}.parquet"
        for cam in src.camera_keys:
            assert row[f"videos/{cam}/from_timestamp"] == 0.0
            assert row[f"videos/{cam}/to_timestamp"] == e.length / src.fps
    assert (small_compiled / "meta/tasks.parquet").read_bytes() == (small_source / "meta/tasks.parquet").read_bytes()


def test_shards_are_webdataset_records(small_compiled):
    """webdataset reads the shards, and its own TarWriter writes the very same bytes."""
    urls = [str(p) for p in sorted((small_compiled / "shards").glob("*.tar"))]
    samples = list(wds.WebDataset(urls, shardshuffle=False))
    assert [s["__key__"] for s in samples] == [f"{i:06d}" for i in range(8)]
    assert set(samples[0]) - {"__key__", "__url__", "__local_path__"} == {
        "json", "parquet", "observation.images.top.mp4", "observation.images.wrist.mp4"}
    first = Path(urls[0]).read_bytes()
    buf = io.BytesIO()
    writer = wds.TarWriter(buf, user="roboreel", group="roboreel", mode=0o444, mtime=0, encoder=False)
    for s in samples[:2]:
        writer.write(EpisodeRecord.from_sample(s).to_sample())
    writer.close()
    assert buf.getvalue() == first


# -- determinism, parallelism, parts, resume ------------------------------------------------------------
def test_deterministic_and_worker_count_independent(small_source, small_compiled, tmp_path):
    out = tmp_path / "again"
    report = compile_dataset(str(small_source), str(out), settings=TEST, workers=2)
    assert report.shards == report.shards_compiled == 4 and report.finalized
    assert_same_tree(small_compiled, out)


def test_parts_then_finalize_equal_single_compile(small_source, small_compiled, tmp_path):
    out = tmp_path / "parts"
    r0 = compile_dataset(str(small_source), str(out), settings=TEST, part=(0, 3))
    assert (r0.shards, r0.finalized) == (1, False) and not (out / "roboreel.json").exists()
    with pytest.raises(CompiledFormatError, match=r"3 of 4 shards are not compiled yet \(shards 1-3\)"):
        finalize(str(out))
    r1 = compile_dataset(str(small_source), str(out), settings=TEST, part=(1, 3), finalize=False)
    r2 = compile_dataset(str(small_source), str(out), settings=TEST, part=(2, 3), finalize=False)
    assert r1.shards + r2.shards == 3 and not (out / "roboreel.json").exists()
    m = finalize(str(out))
    assert len(m.episodes) == 8
    assert_same_tree(small_compiled, out)


def test_rerun_repairs_deleted_truncated_and_temp_files(small_source, small_compiled, tmp_path):
    out = tmp_path / "damaged"
    shutil.copytree(small_compiled, out)
    (out / "roboreel.json").unlink()
    (out / shard_path(1)).unlink()
    (out / ".roboreel-parts/shard-000001.json").unlink()
    tar2 = out / shard_path(2)
    tar2.write_bytes(tar2.read_bytes()[:1000])  # truncated, sidecar still claims the full size
    (out / "shards/.shard-000003.tar.deadbeef.tmp").write_bytes(b"half a shard")
    report = compile_dataset(str(small_source), str(out), settings=TEST)
    assert (report.shards_compiled, report.shards_skipped) == (2, 2) and report.finalized
    assert_same_tree(small_compiled, out)


def test_resume_after_killed_compile(source_factory, tmp_path):
    src = source_factory("resume", episodes=8, min_length=40, max_length=60)
    settings = CompileSettings(episodes_per_shard=1)  # default preset: slow enough to interrupt
    reference = tmp_path / "reference"
    compile_dataset(str(src), str(reference), settings=settings)
    out = tmp_path / "killed"
    cmd = [sys.executable, "-c", "import sys; from roboreel.cli import main; sys.exit(main())", "compile", str(src), str(out), "--episodes-per-shard", "1",
           "--workers", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list((out / ".roboreel-parts").glob("shard-*.json")) and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = list((out / ".roboreel-parts").glob("shard-*.json"))
    assert 1 <= len(done) < 8 and not (out / "roboreel.json").exists()
    report = compile_dataset(str(src), str(out), settings=settings)
    assert report.shards_skipped == len(done) and report.shards_compiled == 8 - len(done) and report.finalized
    assert list(out.rglob("*.tmp")) == []
    assert_same_tree(reference, out)


def test_refuses_foreign_or_different_out(small_source, small_compiled, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no roboreel compile"):
        compile_dataset(str(small_source), str(foreign), settings=TEST)
    with pytest.raises(FileExistsError, match="refusing to delete"):
        compile_dataset(str(small_source), str(foreign), settings=TEST, overwrite=True)
    assert (foreign / "notes.txt").read_text() == "mine"
    other = tmp_path / "other"
    shutil.copytree(small_compiled, other)
    with pytest.raises(FileExistsError, match="setting crf: 24 vs 30"):
        compile_dataset(str(small_source), str(other), settings=TEST.replace(crf=30))
    report = compile_dataset(str(small_source), str(other), settings=TEST.replace(crf=30), overwrite=True)
    assert report.finalized and load_manifest(str(other)).settings["crf"] == 30
    same = compile_dataset(str(small_source), str(other), settings=TEST.replace(crf=30))  # complete: no work
    assert (same.shards_compiled, same.shards_skipped) == (0, 4) and same.finalized


def test_cli_compile_and_finalize(small_source, tmp_path, capsys):
    from roboreel.cli import main

    out = tmp_path / "cli"
    args = ["compile", str(small_source), str(out), "--preset", "ultrafast", "--episodes-per-shard", "2",
            "--workers", "1", "--no-progress"]
    assert main([*args, "--part", "0/2"]) == 0
    assert "not finalized" in capsys.readouterr().out
    assert main(["compile", "--finalize", str(out)]) == 2
    assert "shards 2-3" in capsys.readouterr().err
    assert main([*args, "--part", "1/2"]) == 0
    text = capsys.readouterr().out
    assert "manifest written" in text and "PSNR mean" in text and "frames/s" in text
    assert "x the source's" in text  # output / input size
    assert main(["compile", "--finalize", str(out)]) == 0
    assert main([*args, "--part", "2/2"]) == 2
    assert "0 <= K < N" in capsys.readouterr().err
    os.remove(out / "roboreel.json")
    assert main(["compile", "--finalize", str(out)]) == 0 and (out / "roboreel.json").exists()


def test_remote_source_over_http(small_source, small_compiled, tmp_path):
    """SRC as an fsspec URL (a local HTTP server): same shards, rows and meta as compiling the local path."""
    from support.plainhttp import serving

    out = tmp_path / "remote"
    with serving(small_source) as url:
        report = compile_dataset(url, str(out), settings=TEST, workers=2)
    assert report.finalized
    a, b = tree(small_compiled), tree(out)
    assert sorted(a) == sorted(b)
    differ = [k for k in a if a[k] != b[k]]
    sidecars = [k for k in differ if k.startswith(".roboreel-parts/shard-")]
    assert [k for k in differ if k not in sidecars] == [".roboreel-compile.json", "roboreel.json"]  # name the URL
    for k in sidecars:  # a plain HTTP server gives a Last-Modified, not sha256: other fingerprints, else equal
        local, remote = json.loads(a[k]), json.loads(b[k])
        assert all(fp["episode"] is not None for fp in remote.pop("fingerprints").values())
        local.pop("fingerprints")
        assert local == remote
    assert load_manifest(str(out)).source["url"].startswith("http://127.0.0.1:")


def test_rerun_removes_the_temp_of_a_record_write_that_was_killed(small_source, small_compiled, tmp_path):
    """A kill while the record is written leaves its temp file; the run that finalizes removes it."""
    out = tmp_path / "out"
    shutil.copytree(small_compiled, out)
    stale = out / "..roboreel-compile.json.0123456789ab.tmp"
    stale.write_bytes(b'{"format": "roboreel-compile-lock", "ver')
    compile_dataset(str(small_source), str(out), settings=TEST)
    assert not stale.exists()


def test_the_summary_says_why_it_has_no_psnr():
    """Lossless clips only (depth maps, lossless image clips): no PSNR, and the summary says why."""
    kw = dict(out="out", episodes=1, frames=4, shards=1, shards_total=1, shards_compiled=1, shards_skipped=0,
              clips_encoded=2, clips_remuxed=0, bytes=100, psnr_mean=None, psnr_min=None, seconds=1.0,
              frames_per_s=4.0, finalized=True)
    assert "PSNR n/a (no lossy clips; 2 lossless)" in CompileReport(**kw, clips_lossless=2).summary()
    assert "PSNR n/a (no re-encoded clips)" in CompileReport(**kw).summary()
    assert "PSNR not sampled (--psnr-frames 0)" in CompileReport(**kw, clips_unsampled=2).summary()
