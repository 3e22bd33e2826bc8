"""``roboreel doctor [PATH]``: versions, codec support, and whether PATH decodes on the requested device."""

from __future__ import annotations

import argparse
import json


def decode_device(text: str) -> str:
    """argparse type of ``--decode-device`` (doctor, bench read): cpu, cuda or cuda:N, else a usage error."""
    from roboreel.doctor.env import parse_device

    try:
        parse_device(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="report torch/torchcodec/FFmpeg/PyAV/GPU facts and whether a dataset decodes on a device",
        description="Report the decoding stack (torch, torchcodec, FFmpeg, PyAV, the GPU and its NVDEC) and, given "
                    "PATH, whether every camera of that dataset decodes on --decode-device, and how (NVDEC or a CPU "
                    "fallback). Exit code: 0 decodable on --decode-device, 1 not decodable there, 2 PATH unreadable.",
    )
    p.add_argument("path", nargs="?", default=None, metavar="PATH",
                   help="a compiled roboreel dataset or a LeRobot v3 source, local or fsspec URL (default: none, "
                        "only the environment)")
    p.add_argument("--decode-device", type=decode_device, default="cpu", metavar="DEVICE",
                   help="where to decode, as DecodeOptions(device=...) sets it: cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--json", action="store_true", help="print the facts as JSON instead of text")
    p.add_argument("--strict", action="store_true",
                   help="with a CUDA --decode-device: fail when any clip would be decoded on the CPU instead of NVDEC")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.doctor import run_doctor
    from roboreel.doctor.text import render

    report = run_doctor(args.path, device=args.decode_device, strict=args.strict)
    print(json.dumps(report.to_dict(), indent=1) if args.json else render(report))
    return report.exit_code
