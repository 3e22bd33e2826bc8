"""Run every check, then judge: can this machine decode the dataset (or, without one, roboreel's compiled
clips) on the requested device? The judgement is a list of verdict lines and an exit code:

- 0: decodable on the requested device (a CPU fallback on a GPU that the NVDEC table predicts, e.g. AV1 on an
  H100 or frames under NVDEC's minimum, counts, with a note; ``strict`` makes it 1),
- 1: not decodable there (the first line says why), or, on a GPU, a *silent* CPU fallback: torchcodec decoded on
  the CPU a clip that NVDEC should take (the HEVC probe, or a camera within the NVDEC table), typically because
  the driver's libnvcuvid.so.1 is missing, or a torchcodec that cannot tell NVDEC from a fallback at all,
- 2: PATH is not a readable dataset.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from roboreel.doctor.codecs import PROBE_SIZE, CodecProbe, DecodeOutcome, probe_codecs
from roboreel.doctor.dataset import DatasetCheck, check_dataset
from roboreel.doctor.env import Environment, collect_environment, error_line, parse_device
from roboreel.doctor.fallback import NVCUVID_HINT
from roboreel.doctor.ffmpeg import pyav_codecs, system_ffmpeg_codecs
from roboreel.doctor.nvdec import nvdec_support
from roboreel.formats.errors import RoboreelError

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_NOT_DECODABLE, EXIT_UNREADABLE = 0, 1, 2
COMPILED_CODEC = "hevc"  # what `roboreel compile` writes: the no-PATH verdict is about this codec


@dataclass
class Report:
    """Everything ``roboreel doctor`` found; ``to_dict`` is the ``--json`` output."""

    device: str
    environment: Environment
    ffmpeg: dict[str, Any]
    probes: list[CodecProbe]
    dataset: DatasetCheck | None = None
    dataset_path: str | None = None
    dataset_error: str | None = None
    verdict: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exit_code: int = EXIT_OK

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        from roboreel._version import __version__

        return {
            "roboreel": __version__,
            "device": self.device,
            "environment": self.environment.to_dict(),
            "ffmpeg": self.ffmpeg,
            "probes": {p.codec: p.to_dict() for p in self.probes},
            "dataset": (self.dataset.to_dict() if self.dataset else
                        {"path": self.dataset_path, "error": self.dataset_error} if self.dataset_path else None),
            "verdict": {"ok": self.ok, "exit_code": self.exit_code, "lines": self.verdict, "notes": self.notes},
        }


def run_doctor(path: str | None = None, *, device: str = "cpu", strict: bool = False) -> Report:
    """Check the environment, probe hevc/h264/av1, check ``path`` if given, and judge for ``device``.

    ``device``: "cpu", "cuda" or "cuda:N". ``strict``: a clip that would be decoded on the CPU although a GPU
    was asked for (AV1 without AV1 NVDEC, frames under NVDEC's minimum) makes the verdict fail.
    """
    kind, _ = parse_device(device)  # ValueError naming the allowed forms
    env = collect_environment(device=device)
    cuda = env.cuda
    gpu_device = f"cuda:{cuda.index}" if cuda and cuda.available else None
    tc = env.torchcodec.get("ffmpeg") or {}
    libs = tc.get("libraries") or {}
    ffmpeg: dict[str, Any] = {"pyav": pyav_codecs()}
    if "libavcodec" in libs:
        ffmpeg["torchcodec"] = system_ffmpeg_codecs(
            avcodec_major=int(libs["libavcodec"].split(".")[0]),
            avutil_major=int(libs["libavutil"].split(".")[0]) if "libavutil" in libs else None,
        )
    else:
        ffmpeg["torchcodec"] = {"error": tc.get("error", "torchcodec reports no FFmpeg library versions")}
    probes = probe_codecs(cuda_device=gpu_device) if env.torchcodec.get("installed") else []
    report = Report(device=device, environment=env, ffmpeg=ffmpeg, probes=probes, dataset_path=path)
    if path is not None:
        try:
            report.dataset = check_dataset(path, cuda=cuda, gpu_device=gpu_device, gpu_requested=kind == "cuda")
        except (RoboreelError, OSError) as e:
            logger.debug("dataset check failed", exc_info=True)
            report.dataset_error = str(e) if isinstance(e, RoboreelError) else error_line(e)
    _judge(report, strict=strict)
    return report


def _torchcodec_hint(report: Report, error: str | None) -> str:
    tc = report.environment.torchcodec
    if error and "Unsupported device" in error and tc.get("build") == "CPU":
        return (f" (torchcodec {tc.get('version')} is a CPU build: install a CUDA torch >= 2.11 and "
                "`pip install 'torchcodec>=0.15'`, whose PyPI wheels are CUDA builds; docs/gpu.md, "
                "\"Install on a CUDA machine\")")
    return ""


def _silent_fallback(report: Report, where: str) -> str | None:
    """The verdict line when cuda decode does not reach NVDEC although it should: the HEVC probe (256x256, within
    every NVDEC since Pascal) fell back to the CPU, or this torchcodec cannot say whether it did. None: NVDEC
    decoded the probe, or there was no probe to judge."""
    p = next((p for p in report.probes if p.codec == COMPILED_CODEC), None)
    o = p.cuda if p else None
    if o is None or not o.ok:
        return None
    tc = report.environment.torchcodec.get("version")
    if o.engine == "cuda":
        return (f"cannot tell NVDEC from a silent CPU fallback on {where}: torchcodec {tc} does not report "
                "VideoDecoder.cpu_fallback (install `torchcodec>=0.15`, docs/gpu.md)")
    cuda = report.environment.cuda
    predicted, _ = nvdec_support(COMPILED_CODEC, PROBE_SIZE, PROBE_SIZE, capability=cuda.capability if cuda else None)
    if o.engine != "cpu-fallback" or not predicted:
        return None
    return (f"cuda decode silently falls back to the CPU on {where}: NVDEC decoded no frame of the "
            f"{PROBE_SIZE}x{PROBE_SIZE} {COMPILED_CODEC} probe; torchcodec says \"{o.fallback}\""
            + _cause_hint(o))


def _cause_hint(o: DecodeOutcome) -> str:
    return f" ({NVCUVID_HINT})" if o.fallback_cause == "nvcuvid-unavailable" else ""


def _judge(report: Report, *, strict: bool) -> None:
    """Fill report.verdict, report.notes and report.exit_code."""
    kind, _ = parse_device(report.device)
    cuda = report.environment.cuda
    where = "cpu" if kind == "cpu" else f"cuda:{cuda.index}" if cuda and cuda.available else report.device
    _note_encoders(report)
    blocked = _blocker(report, kind, where)
    if blocked is not None:
        return _fail(report, *blocked)
    if report.dataset is None:
        return _judge_probe(report, kind, where, strict=strict)
    cams = report.dataset.cameras
    if not cams:
        report.verdict.append("VERDICT: dataset has no video features: nothing to decode")
        return None
    if kind == "cpu":
        return _judge_cpu(report, cams)
    return _judge_gpu(report, cams, where, strict=strict)


def _fail(report: Report, line: str, code: int = EXIT_NOT_DECODABLE) -> None:
    """Make ``line`` the verdict: a failure is the verdict; anything judged before it (e.g. "decodable, but via
    CPU") becomes a note."""
    report.notes[:0] = [v.removeprefix("VERDICT: ") for v in report.verdict]
    report.verdict[:] = [f"VERDICT: {line}"]
    report.exit_code = code


def _note_encoders(report: Report) -> None:
    """Note a codec PyAV cannot encode: it decides nothing about decoding, but `roboreel compile` needs it."""
    probes = {p.codec: p for p in report.probes}
    for codec in ("hevc",):
        p = probes.get(codec)
        if p is not None and p.encoder is None:
            report.notes.append(f"PyAV cannot encode {codec}: `roboreel compile` will fail ({p.encode_error})")


def _blocker(report: Report, kind: str, where: str) -> tuple[str, int] | None:
    """Why nothing can be decoded on ``where`` whatever the clips (the failure line and exit code), checked
    before any clip: an unreadable dataset, no torchcodec, no CUDA device, or cuda decode that never reaches
    NVDEC. None: go on and judge the clips."""
    if report.dataset_path is not None and report.dataset is None:
        return f"cannot read {report.dataset_path}: {report.dataset_error}", EXIT_UNREADABLE
    if not report.environment.torchcodec.get("installed"):
        return (f"cannot decode on {where}: torchcodec is not importable "
                f"({report.environment.torchcodec.get('error')})", EXIT_NOT_DECODABLE)
    cuda = report.environment.cuda
    if kind == "cuda" and not (cuda and cuda.available):
        return (f"cannot decode on {report.device}: no CUDA device ({cuda.reason if cuda else 'unknown'})",
                EXIT_NOT_DECODABLE)
    if kind == "cuda":
        silent = _silent_fallback(report, where)
        if silent is not None:
            return silent, EXIT_NOT_DECODABLE
    return None


def _judge_probe(report: Report, kind: str, where: str, *, strict: bool) -> None:
    """No dataset: judge the hevc probe clip, standing for roboreel's compiled clips."""
    p = {p.codec: p for p in report.probes}.get(COMPILED_CODEC)
    outcome = (p.cpu if kind == "cpu" else p.cuda) if p else None
    if outcome is None:
        return _fail(report, f"cannot check {COMPILED_CODEC} decoding on {where}: no {COMPILED_CODEC} probe clip "
                             f"({p.encode_error if p else 'not run'})")
    if not outcome.ok:
        return _fail(report, f"cannot decode {COMPILED_CODEC} (roboreel's compiled clips) on {where}: "
                             f"{outcome.error}" + _torchcodec_hint(report, outcome.error))
    engine = outcome.engine
    report.verdict.append(f"VERDICT: this environment decodes {COMPILED_CODEC} (roboreel's compiled clips) on "
                          f"{where}" + (f" via {engine}" if kind == "cuda" else ""))
    if engine == "cpu-fallback":
        report.notes.append(f"{COMPILED_CODEC} probe fell back to CPU decode on {where}: {outcome.fallback}")
        if strict:
            _fail(report, f"{COMPILED_CODEC} is not decoded by NVDEC on {where} (--strict)")
    return None


def _judge_cpu(report: Report, cams: list) -> None:
    """A dataset on the CPU: decodable when every camera decodes there; else the first that does not."""
    bad_cpu = [c for c in cams if not c.cpu.ok]
    if bad_cpu:
        c = bad_cpu[0]
        return _fail(report, f"cannot decode on cpu: camera {c.key} ({c.codec} {c.width}x{c.height}, {c.clip}): "
                             f"{c.cpu.error}" + _more(bad_cpu))
    report.verdict.append(f"VERDICT: dataset decodable on cpu ({_summary(cams)})")
    return None


def _judge_gpu(report: Report, cams: list, where: str, *, strict: bool) -> None:
    """A dataset on a GPU: fails on a camera cuda cannot decode, or one that falls back to the CPU silently (or
    may have, unreported); a fallback the NVDEC table predicts passes with a note (fails with ``strict``)."""
    bad_gpu = [c for c in cams if c.gpu_status == "failed"]
    if bad_gpu:
        c = bad_gpu[0]
        return _fail(report, f"cannot decode on {where}: camera {c.key} ({c.codec} {c.width}x{c.height}): "
                             f"{c.gpu_reason}" + _torchcodec_hint(report, c.gpu_reason))
    for c in [c for c in cams if not c.cpu.ok]:
        report.notes.append(f"camera {c.key} does not decode on the CPU ({c.cpu.error}): no CPU fallback for it")
    unexpected = [c for c in cams if c.gpu_status == "cpu-fallback" and c.nvdec_ok]
    if unexpected:
        c = unexpected[0]
        return _fail(report, f"cuda decode silently falls back to the CPU on {where}: camera {c.key} ({c.codec} "
                             f"{c.width}x{c.height}) is within NVDEC's limits, yet torchcodec decoded it on the CPU "
                             f"(\"{c.gpu.fallback if c.gpu else c.gpu_reason}\")"
                             + (_cause_hint(c.gpu) if c.gpu else "") + _more(unexpected))
    unknown = [c for c in cams if c.gpu_status == "cuda"]
    if unknown:
        return _fail(report, f"cannot tell NVDEC from a silent CPU fallback on {where} for camera {unknown[0].key}: "
                             f"torchcodec {report.environment.torchcodec.get('version')} does not report "
                             "VideoDecoder.cpu_fallback (install `torchcodec>=0.15`, docs/gpu.md)")
    fallback = [c for c in cams if c.gpu_status == "cpu-fallback"]
    nvdec = sum(c.gpu_status == "nvdec" for c in cams)
    report.verdict.append(f"VERDICT: dataset decodable on {where} ({_summary(cams)}; NVDEC for {nvdec} of "
                          f"{len(cams)} cameras)")
    for c in fallback:
        report.notes.append(f"camera {c.key} ({c.codec} {c.width}x{c.height}) is decoded on the CPU, then moved "
                            f"to {where}: {c.gpu_reason}")
    if fallback and strict:
        _fail(report, f"{len(fallback)} of {len(cams)} cameras are not decoded by NVDEC on {where} (--strict)")
    return None


def _more(cams: list) -> str:
    """A failure line names the first of ``cams``; this tail counts the rest ("" when there are none)."""
    return f" (and {len(cams) - 1} more cameras)" if len(cams) > 1 else ""


def _summary(cams: list) -> str:
    return ", ".join(f"{c.key}: {c.codec} {c.width}x{c.height}" for c in cams)
