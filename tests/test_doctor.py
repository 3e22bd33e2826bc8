"""``roboreel doctor``: versions, codec probes on real clips, dataset checks on real synthetic datasets, and the
NVDEC table. On this CPU-only machine it must report "no CUDA" cleanly; GPU tests skip without CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import av
import pytest
import torch
from torchcodec import _core as tc_core

from roboreel.cli import main
from roboreel.doctor import nvdec_support, run_doctor
from roboreel.doctor.codecs import DecodeOutcome
from roboreel.doctor.dataset import ClipToCheck, DatasetCheck, _judge
from roboreel.doctor.env import CudaInfo, parse_device
from roboreel.doctor.fallback import parse_fallback_status, read_fallback_status
from roboreel.doctor.report import Report
from roboreel.doctor.report import _judge as judge_report
from roboreel.doctor.text import render
from roboreel.formats.lerobot_v3 import LeRobotSource

HAVE_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU")
no_cuda = pytest.mark.skipif(HAVE_CUDA, reason="checks the no-CUDA report")


def doctor(capsys, *argv: str) -> tuple[int, str]:
    rc = main(["doctor", *argv])
    return rc, capsys.readouterr().out


def doctor_json(capsys, *argv: str) -> tuple[int, dict]:
    rc, out = doctor(capsys, *argv, "--json")
    return rc, json.loads(out)


# -- the environment, no PATH ------------------------------------------------------------------------------
def test_cpu_without_path_decodes_hevc_and_labels_both_ffmpegs(capsys):
    rc, out = doctor(capsys, "--decode-device", "cpu")
    assert rc == 0
    assert out.rstrip().splitlines()[-1] == "VERDICT: this environment decodes hevc (roboreel's compiled clips) on cpu"
    system = tc_core.get_ffmpeg_library_versions()["ffmpeg_version"]
    assert f"FFmpeg     {system}: the system FFmpeg torchcodec decodes with" in out
    assert f"FFmpeg     {av.ffmpeg_version_info}: bundled with PyAV, used to encode" in out
    assert f"torch        {torch.__version__}" in out
    for section in ("Environment", "Codecs"):
        assert section in out.splitlines()


@no_cuda
def test_no_cuda_is_reported_cleanly(capsys):
    rc, out = doctor(capsys, "--decode-device", "cpu")
    assert rc == 0 and "  CUDA         no CUDA: torch.cuda.is_available() is False" in out
    for codec in ("hevc", "h264", "av1"):  # every probe decodes on CPU and says why it skipped CUDA
        probe_rows = out.split("  probe: ", 1)[1].splitlines()
        row = next(line for line in probe_rows if line.split()[0] == codec)
        assert row.split()[2:] == ["ok", "no", "CUDA"], row


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_gpu_fails_naming_the_reason(capsys, device):
    rc, out = doctor(capsys, "--decode-device", device)
    assert rc == 1
    verdict = out.rstrip().splitlines()[-1]
    assert verdict.startswith(f"VERDICT: cannot decode on {device}: no CUDA device (torch.cuda.is_available() is False")
    if torch.version.cuda is None:
        assert "is a CPU build" in verdict


def test_json_structure_matches_the_libraries(capsys):
    rc, d = doctor_json(capsys)
    assert rc == 0
    assert set(d) == {"roboreel", "device", "environment", "ffmpeg", "probes", "dataset", "verdict"}
    env = d["environment"]
    assert env["torch"]["version"] == torch.__version__
    assert env["pyav"]["version"] == av.__version__ and env["pyav"]["ffmpeg"]["version"] == av.ffmpeg_version_info
    libs = tc_core.get_ffmpeg_library_versions()
    assert env["torchcodec"]["ffmpeg"]["version"] == libs["ffmpeg_version"]
    assert env["torchcodec"]["ffmpeg"]["libraries"]["libavcodec"] == ".".join(map(str, libs["libavcodec"]))
    assert env["cuda"]["available"] is HAVE_CUDA
    assert d["dataset"] is None
    assert d["verdict"] == {"ok": True, "exit_code": 0, "lines": [d["verdict"]["lines"][0]], "notes": []}
    for codec in ("hevc", "h264", "av1"):
        p = d["probes"][codec]
        assert p["cpu"]["ok"] and p["cpu"]["codec"] == codec and (p["cpu"]["width"], p["cpu"]["height"]) == (256, 256)
        assert p["cpu"]["num_frames"] == 2 and abs(p["cpu"]["first_frame_mean"] - 64) <= 8
        # the encoder that made the probe is one PyAV lists for that codec; the system FFmpeg can decode it
        assert p["encoder"] in d["ffmpeg"]["pyav"]["families"][codec]["encoders"]
        assert d["ffmpeg"]["torchcodec"]["families"][codec]["decoders"]
        assert (p["cuda"] is not None) is HAVE_CUDA


def test_bad_device_is_refused_naming_the_allowed_forms():
    for bad in ("gpu", "cuda:x", "cpu:0", "CUDA"):
        with pytest.raises(ValueError, match=r"is not one of 'cpu', 'cuda', 'cuda:N'"):
            parse_device(bad)
    assert parse_device("cuda:3") == ("cuda", 3) and parse_device("cpu") == ("cpu", None)
    with pytest.raises(SystemExit) as e:
        main(["doctor", "--decode-device", "gpu"])
    assert e.value.code == 2


# -- PATH: a LeRobot v3 source (AV1 64x64) -------------------------------------------------------------------
def test_source_av1_decodable_on_cpu(capsys, small_source):
    rc, d = doctor_json(capsys, str(small_source))
    assert rc == 0
    ds = d["dataset"]
    src = LeRobotSource(str(small_source))
    assert ds["kind"] == "source" and [c["key"] for c in ds["cameras"]] == src.camera_keys
    for cam in ds["cameras"]:
        assert (cam["codec"], cam["width"], cam["height"]) == ("av1", 64, 64)
        assert cam["cpu"]["ok"] and cam["cpu"]["engine"] == "cpu"
        # the clip decoded is the first episode's mp4: torchcodec saw every frame the episodes put in it
        first = src.episodes[0].videos[cam["key"]].path
        assert cam["clip"] == first
        assert cam["cpu"]["num_frames"] == sum(e.length for e in src.episodes if e.videos[cam["key"]].path == first)
        assert cam["nvdec"]["ok"] is False  # AV1 at 64x64 is under every NVDEC's AV1 minimum (128x128)
        if not HAVE_CUDA:
            assert cam["gpu_status"] == "no-cuda" and cam["gpu"] is None
    assert d["verdict"]["lines"] == [
        "VERDICT: dataset decodable on cpu (observation.images.top: av1 64x64, observation.images.wrist: av1 64x64)"]


@no_cuda
def test_source_on_cuda_without_gpu_fails_and_advises_hevc(capsys, small_source):
    rc, out = doctor(capsys, str(small_source), "--decode-device", "cuda")
    assert rc == 1
    # 64x64 is under NVDEC's minimum for HEVC too, so compiling would not help: doctor says so
    assert "note: compiling to HEVC would not move it to NVDEC either: 64x64 is below NVDEC's hevc minimum" in out
    assert out.rstrip().splitlines()[-1].startswith("VERDICT: cannot decode on cuda: no CUDA device")


def test_corrupt_clip_is_not_decodable(capsys, source_factory):
    root = source_factory("broken", episodes=2, min_length=6, max_length=8)
    src = LeRobotSource(str(root))
    top = src.episodes[0].videos["observation.images.top"].path
    (root / top).write_bytes(b"\0" * 4096)
    rc, out = doctor(capsys, str(root))
    assert rc == 1
    verdict = out.rstrip().splitlines()[-1]
    assert verdict.startswith(f"VERDICT: cannot decode on cpu: camera observation.images.top (av1 64x64, {top}): ")


# -- PATH unreadable -> exit 2 -----------------------------------------------------------------------------
def test_unreadable_path_exits_2(capsys, tmp_path, small_source):
    rc, out = doctor(capsys, str(tmp_path / "missing"))
    assert rc == 2 and out.rstrip().splitlines()[-1].startswith(f"VERDICT: cannot read {tmp_path / 'missing'}: ")
    rc, out = doctor(capsys, str(tmp_path))  # a directory that is neither format
    assert rc == 2 and "not a compiled roboreel dataset (no roboreel.json) nor a LeRobot v3 source" in out
    bad = tmp_path / "bad"
    (bad / "meta").mkdir(parents=True)
    (bad / "meta" / "info.json").write_text("{not json")
    rc, d = doctor_json(capsys, str(bad))
    assert rc == 2 and d["verdict"]["exit_code"] == 2 and d["dataset"]["path"] == str(bad)
    assert "not valid JSON" in d["dataset"]["error"] and "meta/info.json" in d["dataset"]["error"]


# -- PATH: a compiled dataset (HEVC) ------------------------------------------------------------------------
def test_compiled_hevc_decodable_on_cpu(capsys, small_compiled):
    from roboreel.formats.manifest import load_manifest

    rc, d = doctor_json(capsys, str(small_compiled))
    assert rc == 0
    m = load_manifest(str(small_compiled))
    first = m.episode(m.shards[0].episodes[0])
    ds = d["dataset"]
    assert ds["kind"] == "compiled" and [c["key"] for c in ds["cameras"]] == m.camera_keys
    for cam in ds["cameras"]:
        assert cam["codec"] == "hevc" and cam["cpu"]["ok"] and cam["cpu"]["num_frames"] == first.length
        assert cam["clip"].startswith(m.shards[0].path + ":")
        assert cam["nvdec"]["ok"] is False and "below NVDEC's hevc minimum 144x144" in cam["nvdec"]["reason"]
    assert d["verdict"]["lines"][0].startswith("VERDICT: dataset decodable on cpu")


# -- the verdict on GPU outcomes (recorded outcomes: this machine has no GPU) --------------------------------
def _gpu_report(small_source, engine: str, *, strict: bool) -> Report:
    """A real CPU report of small_source, with CUDA facts and GPU outcomes as an H100 records them."""
    report = run_doctor(str(small_source), device="cpu")
    report.device = "cuda"
    h100 = CudaInfo(available=True, index=0, name="NVIDIA H100 80GB HBM3", capability=(9, 0), device_count=1)
    report.environment.cuda = h100
    cams = []
    for c in report.dataset.cameras:
        gpu = DecodeOutcome(ok=True, device="cuda:0", engine=engine, codec=c.codec, width=c.width, height=c.height,
                            fallback="[CUDA] Fallback status: Falling back due to: Video not supported")
        cams.append(_judge(ClipToCheck(c.key, c.codec, c.width, c.height, c.clip, None), c.cpu, gpu, h100, advise=True))
    report.dataset = DatasetCheck(path=report.dataset.path, kind="source", cameras=cams)
    report.verdict, report.notes = [], []
    judge_report(report, strict=strict)
    return report


def test_cpu_fallback_on_gpu_passes_with_notes_and_fails_when_strict(small_source):
    loose = _gpu_report(small_source, "cpu-fallback", strict=False)
    assert loose.exit_code == 0 and loose.verdict[0].startswith("VERDICT: dataset decodable on cuda:0")
    assert loose.verdict[0].endswith("NVDEC for 0 of 2 cameras)")
    assert len(loose.notes) == 2 and "sm_90 Hopper (H100/H200) has no AV1 NVDEC" in loose.notes[0]
    strict = _gpu_report(small_source, "cpu-fallback", strict=True)
    assert strict.exit_code == 1
    assert strict.verdict == ["VERDICT: 2 of 2 cameras are not decoded by NVDEC on cuda:0 (--strict)"]


# -- torchcodec's own fallback verdict: a silent CPU fallback is not NVDEC ------------------------------------
H100 = CudaInfo(available=True, index=0, name="NVIDIA H100 80GB HBM3", capability=(9, 0), device_count=1)
NVCUVID_MISSING = "[CUDA] Fallback status: Falling back due to: NVcuvid unavailable"


@pytest.mark.parametrize(("text", "known", "fallback", "cause"), [
    (NVCUVID_MISSING, True, True, "nvcuvid-unavailable"),
    ("[CUDA] Fallback status: Falling back due to: Video not supported", True, True, "video-not-supported"),
    ("[FFmpeg CUDA] Fallback status: Falling back due to: Unknown reason - try the 'nvdec' backend to know more!",
     True, True, "unknown"),
    ("[CUDA] Fallback status: No fallback required", True, False, None),
    ("[FFmpeg CUDA] Fallback status: Unknown", False, False, None),
    ("something a later torchcodec prints", False, False, None),
])
def test_fallback_status_text_is_parsed_not_guessed(text, known, fallback, cause):
    got = parse_fallback_status(text)
    assert (got.known, got.fallback, got.cause, got.text) == (known, fallback, cause, text)


def test_fallback_status_of_a_real_cpu_decoder():
    from torchcodec.decoders import VideoDecoder

    from roboreel.doctor.codecs import encode_probe

    dec = VideoDecoder(encode_probe("hevc")[0])
    dec[0]
    got = read_fallback_status(dec)  # torchcodec's own object, read through its public str() and bool()
    assert got is not None and got.known and not got.fallback and got.text.endswith("No fallback required")
    assert read_fallback_status(object()) is None  # a torchcodec without cpu_fallback: nothing to read


def _probe_report(cuda_outcome: DecodeOutcome | None) -> Report:
    """A real no-PATH CPU report, judged as if on an H100 whose hevc probe decoded as ``cuda_outcome``."""
    report = run_doctor(device="cpu")
    report.device, report.environment.cuda = "cuda", H100
    hevc = next(p for p in report.probes if p.codec == "hevc")
    hevc.cuda = cuda_outcome
    report.verdict, report.notes, report.exit_code = [], [], 0
    judge_report(report, strict=False)
    return report


def _hevc_outcome(engine: str, **kw) -> DecodeOutcome:
    return DecodeOutcome(ok=True, device="cuda:0", engine=engine, codec="hevc", width=256, height=256, num_frames=2,
                         first_frame_mean=64.0, **kw)


def test_silent_cpu_fallback_of_the_hevc_probe_fails_and_names_nvcuvid():
    report = _probe_report(_hevc_outcome("cpu-fallback", fallback=NVCUVID_MISSING,
                                         fallback_cause="nvcuvid-unavailable"))
    assert report.exit_code == 1
    line = report.verdict[0]
    assert line.startswith("VERDICT: cuda decode silently falls back to the CPU on cuda:0: NVDEC decoded no frame "
                           f'of the 256x256 hevc probe; torchcodec says "{NVCUVID_MISSING}"')
    assert "libnvcuvid.so.1" in line and "NVIDIA_DRIVER_CAPABILITIES" in line
    assert render(report).rstrip().splitlines()[-1] == line
    assert _probe_report(_hevc_outcome("nvdec")).verdict == [
        "VERDICT: this environment decodes hevc (roboreel's compiled clips) on cuda:0 via nvdec"]
    unknown = _probe_report(_hevc_outcome("cuda"))  # device=cuda, but no fallback verdict to read
    assert unknown.exit_code == 1 and unknown.verdict[0].startswith(
        "VERDICT: cannot tell NVDEC from a silent CPU fallback on cuda:0: torchcodec")


def test_silent_cpu_fallback_of_a_camera_within_nvdec_limits_fails(small_compiled):
    """A 256x256 HEVC camera (within the NVDEC table on an H100) that torchcodec decoded on the CPU: exit 1,
    where an AV1 camera on the same H100 (no AV1 NVDEC: an expected fallback) passes with a note."""
    from dataclasses import replace

    report = run_doctor(str(small_compiled), device="cpu")
    report.device, report.environment.cuda = "cuda", H100
    cams = []
    for c in report.dataset.cameras:
        cpu = replace(c.cpu, width=256, height=256)
        gpu = _hevc_outcome("cpu-fallback", fallback="[CUDA] Fallback status: Falling back due to: Video not "
                            "supported", fallback_cause="video-not-supported")
        cams.append(_judge(ClipToCheck(c.key, "hevc", 256, 256, c.clip, None), cpu, gpu, H100, advise=True))
    report.dataset = DatasetCheck(path=report.dataset.path, kind="compiled", cameras=cams)
    report.verdict, report.notes = [], []
    judge_report(report, strict=False)
    assert report.exit_code == 1
    assert report.verdict[0].startswith(f"VERDICT: cuda decode silently falls back to the CPU on cuda:0: camera "
                                        f"{cams[0].key} (hevc 256x256) is within NVDEC's limits")
    assert report.verdict[0].endswith("(and 1 more cameras)")


def test_nvdec_library_is_reported(capsys):
    import ctypes

    rc, d = doctor_json(capsys)
    nv = d["environment"]["nvdec_library"]
    try:  # an independent load of the same library
        ctypes.CDLL("libnvcuvid.so.1")
        loads = True
    except OSError:
        loads = False
    assert nv["library"] == "libnvcuvid.so.1" and nv["loadable"] is loads
    _, out = doctor(capsys)
    assert f"  NVDEC lib    libnvcuvid.so.1 {'loads' if loads else 'does not load'}" in out


# -- the NVDEC table ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("codec", "h", "w", "cap", "ok", "why"), [
    ("av1", 224, 224, (9, 0), False, "sm_90 Hopper (H100/H200) has no AV1 NVDEC"),
    ("av1", 224, 224, (8, 0), False, "sm_80 GA100 (A100/A30) has no AV1 NVDEC"),
    ("av1", 224, 224, (8, 6), True, "within NVDEC's limits"),
    ("av1", 224, 224, (8, 9), True, "within NVDEC's limits"),
    ("av1", 224, 224, (10, 0), True, "within NVDEC's limits"),
    ("av1", 224, 224, (12, 0), True, "within NVDEC's limits"),
    ("av1", 224, 224, None, False, "compute capability unknown"),
    ("av1", 64, 64, None, False, "64x64 is below NVDEC's av1 minimum 128x128"),
    ("av1", 96, 224, (8, 9), False, "224x96 is below NVDEC's av1 minimum 128x128"),
    ("hevc", 64, 64, (9, 0), False, "64x64 is below NVDEC's hevc minimum 144x144"),
    ("hevc", 64, 64, None, False, "64x64 is below NVDEC's hevc minimum 144x144"),
    ("hevc", 224, 224, (9, 0), True, "hevc 224x224 is within NVDEC's limits on sm_90"),
    ("hevc", 224, 224, None, True, "within NVDEC's limits"),
    ("h265", 144, 144, (8, 0), True, "within NVDEC's limits"),
    ("hevc", 143, 144, (8, 0), False, "below NVDEC's hevc minimum"),
    ("hevc", 224, 224, (5, 2), False, "HEVC NVDEC needs Pascal"),
    ("h264", 64, 64, (9, 0), True, "within NVDEC's limits"),
    ("h264", 16, 48, (9, 0), True, "within NVDEC's limits"),
    ("h264", 16, 40, (9, 0), False, "below NVDEC's h264 minimum 48x16"),
    ("h264", 4320, 7680, (9, 0), False, "above NVDEC's h264 maximum 4096x4096"),
    ("h264", 4320, 7680, (10, 0), True, "within NVDEC's limits"),
    ("vp9", 224, 224, (9, 0), False, "not in roboreel's NVDEC table"),
])
def test_nvdec_table(codec, h, w, cap, ok, why):
    got, reason = nvdec_support(codec, h, w, capability=cap)
    assert got is ok and why in reason, reason


def test_nvdec_table_refuses_empty_frames():
    with pytest.raises(ValueError, match="frame size must be positive, got 0x64"):
        nvdec_support("hevc", 64, 0)


# -- on a real GPU -----------------------------------------------------------------------------------------
@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_probes_agree_with_the_nvdec_table(capsys):
    rc, d = doctor_json(capsys, "--decode-device", "cuda")
    assert rc == 0, d["verdict"]
    cap = tuple(d["environment"]["cuda"]["capability"])
    for codec, p in d["probes"].items():
        assert p["cuda"]["ok"], p
        assert abs(p["cuda"]["first_frame_mean"] - 64) <= 8
        predicted, _ = nvdec_support(codec, 256, 256, capability=cap)
        assert (p["cuda"]["engine"] == "nvdec") is predicted, (codec, cap, p["cuda"])


@pytest.mark.needs_cuda
@needs_cuda
def test_gpu_small_av1_source_falls_back_and_strict_fails(capsys, small_source):
    rc, d = doctor_json(capsys, str(small_source), "--decode-device", "cuda")
    assert rc == 0
    assert {c["gpu_status"] for c in d["dataset"]["cameras"]} == {"cpu-fallback"}  # 64x64 < 128x128
    rc, _ = doctor(capsys, str(small_source), "--decode-device", "cuda", "--strict")
    assert rc == 1


def test_doctor_is_importable_without_torch_at_module_level():
    import subprocess
    import sys

    code = "import sys, roboreel.doctor.nvdec; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
