"""roboreel compile: which sources are stream-copied or re-encoded, resize, and the default fidelity target."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.compiled import clip_codes, read_records
from support.settings import FAST
from torchcodec.decoders import VideoDecoder

from roboreel.compile import compile_dataset
from roboreel.compile.source import SourceVideo
from roboreel.compile.video import EncodeTarget, psnr, transcode_span
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import load_manifest
from roboreel.synth import FrameCode, read

TEST = FAST


@pytest.mark.parametrize("codec", ["libx265", "libx264"])
def test_hevc_and_h264_sources_are_stream_copied(source_factory, tmp_path, codec):
    src = source_factory(codec, codec=codec)
    copied = compile_dataset(str(src), str(tmp_path / "copy"), settings=TEST)
    assert (copied.clips_remuxed, copied.clips_encoded) == (16, 0)
    encoded = compile_dataset(str(src), str(tmp_path / "enc"), settings=TEST.replace(reencode=True))
    assert (encoded.clips_remuxed, encoded.clips_encoded) == (0, 16)
    source = LeRobotSource(str(src))
    expect_codec = {"libx265": "hevc", "libx264": "h264"}[codec]
    for out, clip_codec in ((tmp_path / "copy", expect_codec), (tmp_path / "enc", "hevc")):
        records = read_records(out)
        for e in source.episodes:
            for cam_id, cam in enumerate(source.camera_keys):
                assert records[e.index].meta["cameras"][cam]["codec"] == clip_codec
                assert clip_codes(records[e.index].clips[cam]) == [
                    FrameCode(e.from_index + k, e.index, cam_id) for k in range(e.length)]
    assert load_manifest(str(tmp_path / "copy")).cameras[0].codec == expect_codec


def test_span_not_starting_on_keyframe_is_reencoded(source_factory):
    """A span that cannot be copied alone (starts mid-GOP) falls back to an exact re-encode."""
    src = LeRobotSource(str(source_factory("gop", codec="libx265", g=10, episodes=1, min_length=30,
                                           max_length=30, cameras=("cam",))))
    ep = src.episodes[0]
    video = SourceVideo(src, ep.videos["cam"].path, fps=src.fps, keep_packets=True)
    try:
        clip = transcode_span(video, EncodeTarget(TEST, "test", 0), from_s=3 / src.fps, length=12)
        whole = transcode_span(video, EncodeTarget(TEST, "test", 0), from_s=0.0, length=30)
    finally:
        video.close()
    assert clip.mode == "encode" and clip_codes(clip.data) == [FrameCode(3 + k, 0, 0) for k in range(12)]
    assert whole.mode == "remux" and clip_codes(whole.data) == [FrameCode(k, 0, 0) for k in range(30)]


def test_resize(source_factory, tmp_path):
    src = source_factory("resize", episodes=2, cameras=("cam",))
    out = tmp_path / "out"
    compile_dataset(str(src), str(out), settings=TEST.replace(resize=(128, 128)))
    source = LeRobotSource(str(src))
    for e in source.episodes:
        rec = read_records(out)[e.index]
        assert rec.meta["cameras"]["cam"]["height"] == rec.meta["cameras"]["cam"]["width"] == 128
        dec = VideoDecoder(rec.clips["cam"])
        assert len(dec) == e.length
        for k in range(e.length):  # 2x2 average back to 64x64, where the code grid was painted
            f = dec[k].numpy().astype(np.float32).reshape(3, 64, 2, 64, 2).mean(axis=(2, 4))
            assert read(f.astype(np.uint8), channels_first=True) == FrameCode(e.from_index + k, e.index, 0)
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"]["cam"]["shape"] == [128, 128, 3]


def test_default_settings_keep_35db_at_224(source_factory, tmp_path):
    """The fidelity target: default settings >= 35 dB mean PSNR against the source AV1 decode, at 224x224."""
    src = source_factory("fidelity", episodes=2, min_length=20, max_length=20, height=224, width=224,
                         cameras=("cam",), video_files_size_in_mb=1.0)
    out = tmp_path / "out"
    report = compile_dataset(str(src), str(out))
    assert report.psnr_mean is not None and report.psnr_mean >= 35.0
    # independently: every frame, RGB as torchcodec decodes both
    source = LeRobotSource(str(src))
    records = read_records(out)
    values = []
    for e in source.episodes:
        span = e.videos["cam"]
        ref = VideoDecoder(str(src / span.path))
        first = round(span.from_timestamp * source.fps)
        want = ref.get_frames_in_range(first, first + e.length).data.numpy()
        got = VideoDecoder(records[e.index].clips["cam"]).get_frames_in_range(0, e.length).data.numpy()
        values += [psnr(a, b) for a, b in zip(want, got, strict=True)]
    assert np.mean(values) >= 35.0
