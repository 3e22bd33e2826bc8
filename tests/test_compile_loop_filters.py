"""HEVC in-loop filters (deblocking, SAO): off by default (cheaper CPU decode), on with ``loop_filters=True``.

What x265 did is read from the clips themselves: x265 writes its full option string into every stream (a user
data SEI), so these tests check the encoded bytes, not the parameter string we passed.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from support.settings import FAST

from roboreel.compile import CompileSettings, compile_dataset
from roboreel.compile.out import make_record, record_mismatch
from roboreel.formats.manifest import load_manifest
from roboreel.formats.shard import CLIP_SUFFIX, EpisodeRecord
from roboreel.synth import FrameCode, read

TEST = FAST


def x265_options(clip: bytes) -> set[str]:
    """The option words x265 wrote into the stream's SEI (``options: ... no-sao ...``)."""
    at = clip.find(b"options: ")
    assert at >= 0, "no x265 options SEI in the clip"
    end = clip.find(b"\x00", at)
    return set(clip[at + len(b"options: "):end].decode("ascii", "replace").split())


def clips(out: Path) -> list[bytes]:
    got = []
    for shard in sorted((out / "shards").rglob("*.tar")):
        with tarfile.open(shard) as tar:
            got += [tar.extractfile(m).read() for m in tar if m.name.endswith(CLIP_SUFFIX)]  # type: ignore[union-attr]
    assert got
    return got


def test_default_clips_have_no_deblocking_and_no_sao(small_compiled):
    assert TEST.loop_filters is False and CompileSettings().loop_filters is False
    for clip in clips(small_compiled):
        opts = x265_options(clip)
        assert {"no-deblock", "no-sao"} <= opts, sorted(o for o in opts if "sao" in o or "deblock" in o)
    assert load_manifest(str(small_compiled)).settings["loop_filters"] is False


def test_loop_filters_on_request_and_frames_still_exact(source_factory, tmp_path):
    from torchcodec.decoders import VideoDecoder

    from roboreel.formats.lerobot_v3 import LeRobotSource

    src = source_factory("filters", episodes=2, min_length=12, max_length=12, cameras=("cam",))
    out = tmp_path / "out"
    compile_dataset(str(src), str(out), settings=TEST.replace(loop_filters=True, preset="veryfast"),
                     workers=1)  # veryfast: ultrafast turns SAO off by itself
    for clip in clips(out):
        opts = x265_options(clip)
        assert "sao" in opts and "no-sao" not in opts and "no-deblock" not in opts
        assert any(o.startswith("deblock=") for o in opts)
    manifest = load_manifest(str(out))
    assert manifest.settings["loop_filters"] is True
    assert "no-sao" not in next(iter(manifest.settings["x265_params"].values()))
    records = {}
    for shard in sorted((out / "shards").rglob("*.tar")):
        groups: dict[str, dict[str, bytes]] = {}
        with tarfile.open(shard) as tar:
            for m in tar.getmembers():
                groups.setdefault(m.name.split(".", 1)[0], {})[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
        for members in groups.values():
            rec = EpisodeRecord.from_members(members, shard=str(shard))
            records[rec.index] = rec
    for e in LeRobotSource(str(src)).episodes:  # the frames are still the source's, frame for frame
        dec = VideoDecoder(records[e.index].clips["cam"])
        assert [read(dec[k]) for k in range(e.length)] == [FrameCode(e.from_index + k, e.index, 0)
                                                            for k in range(e.length)]


@pytest.mark.parametrize(("new", "refused"), [(True, False), (False, True)])
def test_a_record_from_before_the_setting_means_filters_on(new: bool, refused: bool):
    """An OUT compiled by an older roboreel (no ``loop_filters`` key) was encoded with x265's filters on: resuming it
    with them on is the same compile; with the new default it is refused, naming the setting."""
    old = make_record(url="src", fingerprint="f", settings=TEST, chunks_size=1000, shards=[[0]])
    del old["settings"]["loop_filters"]
    now = make_record(url="src", fingerprint="f", settings=TEST.replace(loop_filters=new), chunks_size=1000,
                    shards=[[0]])
    diffs = record_mismatch(old, now)
    assert diffs == (["setting loop_filters: True vs False"] if refused else [])
    assert CompileSettings.from_dict(old["settings"]).loop_filters is True
