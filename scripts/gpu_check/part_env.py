"""Part env: the machine (GPU, cores, driver, whether libnvcuvid.so.1 is there), the libraries, and
``roboreel doctor`` on the prepared 480x640 dataset: does cuda decode reach NVDEC or fall back silently?"""

from __future__ import annotations

import platform
import shutil
import subprocess

from common import REAL, cores, cuda_usable, part_args, results


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"


def main() -> None:
    a = part_args(__doc__)
    import av
    import torch
    import torchcodec

    ok, name = cuda_usable()
    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "torchcodec": torchcodec.__version__, "av": av.__version__, "pyav_ffmpeg": av.ffmpeg_version_info,
           "cpu": platform.processor() or platform.machine()}
    if shutil.which("nvidia-smi"):
        env["nvidia_smi"] = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                                  "--format=csv,noheader"])
    env["ldconfig_nvdec"] = [ln.strip() for ln in _run(["ldconfig", "-p"]).splitlines()
                             if "nvcuvid" in ln or "nvidia-encode" in ln]
    values = {"cores": cores(), "environment": env, "device": name if ok and not a.cpu_only else None}
    reasons = {} if values["device"] else {"device": "--cpu-only run: no GPU used" if a.cpu_only else name}
    results.merge(a.results, values, reasons=reasons)

    from roboreel.doctor import run_doctor

    device = "cuda" if ok and not a.cpu_only else "cpu"
    report = run_doctor(str(a.data / REAL), device=device).to_dict()
    results.merge(a.results, {"doctor": {"device": device, "exit_code": report["verdict"]["exit_code"],
                                         "verdict": report["verdict"]["lines"], "notes": report["verdict"]["notes"],
                                         "nvdec_library": report["environment"].get("nvdec_library"),
                                         "probes": {c: (p["cuda"] or p["cpu"] or {}).get("engine")
                                                    for c, p in report["probes"].items()}}})


if __name__ == "__main__":
    main()
