"""The human-readable doctor report: Environment, Codecs, Dataset, then the verdict lines last."""

from __future__ import annotations

from roboreel.doctor.codecs import DecodeOutcome
from roboreel.doctor.nvdec import arch_name
from roboreel.doctor.report import Report


def _cell(o: DecodeOutcome | None, *, missing: str) -> str:
    if o is None:
        return missing
    if not o.ok:
        return f"FAILED: {o.error}"
    return "ok" if o.device == "cpu" else (o.engine or "ok")  # on a GPU, say how: nvdec / cpu-fallback


def _families(block: dict) -> list[str]:
    if "error" in block:
        return [f"    unavailable: {block['error']}"]
    lines = [f"    {block.get('video_decoders', '?')} video decoders, {block.get('video_encoders', '?')} video encoders"
             + (f"; hw device types: {', '.join(block['hw_device_types'])}" if block.get("hw_device_types") else "")]
    for fam, d in block["families"].items():
        lines.append(f"    {fam:<5} decode: {', '.join(d['decoders']) or '-'} | encode: {', '.join(d['encoders']) or '-'}")
    return lines


def render(report: Report) -> str:
    env = report.environment
    out = [f"roboreel doctor (device: {report.device})", "", "Environment", f"  python       {env.python} ({env.platform})"]
    t = env.torch
    out.append(f"  torch        {t['version']} ({t['build']} build)" if t.get("installed") else f"  torch        not importable: {t.get('error')}")
    tc = env.torchcodec
    if tc.get("installed"):
        out.append(f"  torchcodec   {tc['version']} ({tc['build']} build)")
        ff = tc.get("ffmpeg") or {}
        if "error" in ff:
            out.append(f"    FFmpeg     unknown ({ff['error']})")
        else:
            libs = ", ".join(f"{k} {v}" for k, v in ff.get("libraries", {}).items())
            out.append(f"    FFmpeg     {ff.get('version')}: the system FFmpeg torchcodec decodes with ({libs})")
    else:
        out.append(f"  torchcodec   not importable: {tc.get('error')}")
    av = env.pyav
    if av.get("installed"):
        libs = ", ".join(f"{k} {v}" for k, v in av["ffmpeg"]["libraries"].items() if k in ("libavcodec", "libavformat"))
        out += [f"  PyAV         {av['version']}", f"    FFmpeg     {av['ffmpeg']['version']}: bundled with PyAV, used to "
                f"encode ({libs})"]
    else:
        out.append(f"  PyAV         not importable: {av.get('error')}")
    c = env.cuda
    if c and c.available:
        out.append(f"  GPU          cuda:{c.index} {c.name}, {arch_name(c.capability)}, {c.total_memory_gib} GiB, "
                   f"driver {c.driver or 'unknown'}, torch CUDA {c.torch_cuda}, {c.device_count} device(s)")
    else:
        out.append(f"  CUDA         no CUDA: {c.reason if c else 'unknown'}")
    nv = env.nvdec_library
    if nv:
        state = "loads" if nv.get("loadable") else f"does not load ({nv.get('error')})"
        out.append(f"  NVDEC lib    {nv['library']} {state}")

    out += ["", "Codecs"]
    tcv = (tc.get("ffmpeg") or {}).get("version", "?")
    out.append(f"  system FFmpeg {tcv} (torchcodec, decoding)")
    out += _families(report.ffmpeg.get("torchcodec", {"error": "not checked"}))
    out.append(f"  PyAV FFmpeg {av.get('ffmpeg', {}).get('version', '?')} (encoding)")
    out += _families(report.ffmpeg.get("pyav", {"error": "not checked"}))
    no_gpu = "no CUDA" if not (c and c.available) else "not tried"
    out.append("  probe: 2-frame 256x256 clip, PyAV encode -> torchcodec decode")
    out.append(f"    {'codec':<6}{'encoder':<12}{'cpu':<10}cuda")
    for p in report.probes:
        if p.encoder is None:
            out.append(f"    {p.codec:<6}{'-':<12}not encoded: {p.encode_error}")
            continue
        gpu = _cell(p.cuda, missing=no_gpu)
        if p.cuda and p.cuda.fallback:
            gpu += f" ({p.cuda.fallback})"
        out.append(f"    {p.codec:<6}{p.encoder:<12}{_cell(p.cpu, missing='-'):<10}{gpu}")

    if report.dataset_path is not None:
        out += ["", f"Dataset {report.dataset_path}"]
        ds = report.dataset
        if ds is None:
            out.append(f"  unreadable: {report.dataset_error}")
        else:
            out.append(f"  {'compiled roboreel dataset' if ds.kind == 'compiled' else 'LeRobot v3 source'}, "
                       f"{len(ds.cameras)} camera(s); one clip per camera decoded")
            if ds.transform:
                out.append(f"  transform: {ds.transform}")
            for cam in ds.cameras:
                size = f"{cam.width}x{cam.height}"
                out.append(f"  {cam.key}: {cam.codec} {size}")
                out.append(f"    cpu:  {_cell(cam.cpu, missing='-')}    clip: {cam.clip}")
                gpu = cam.gpu_reason if cam.gpu_status == "no-cuda" else f"{cam.gpu_status}: {cam.gpu_reason}"
                out.append(f"    cuda: {gpu}")
                out.append(f"    nvdec table: {'yes' if cam.nvdec_ok else 'no'}: {cam.nvdec_reason}")
                out += [f"    note: {n}" for n in cam.notes]
    out.append("")
    out += [f"NOTE: {n}" for n in report.notes]
    out += report.verdict
    return "\n".join(out)
