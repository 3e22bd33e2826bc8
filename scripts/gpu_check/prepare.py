"""``scripts/gpu_check.sh --prepare DIR``: what the GPU check carries to a machine with no network, made here.

- ``DIR/wheels``: the Python 3.12 wheels the GPU machine lacks (it has torch 2.11 with CUDA and no network),
  fetched with ``pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64
  ...``: torchcodec 0.15 (a CUDA 13.0 build on PyPI, loads with torch 2.11), PyAV 18 (its wheel's FFmpeg 8.1
  serves torchcodec through symlinks, see gpu_check.sh), roboreel's other declared dependencies missing there,
  and what ``LeRobotDataset`` 0.6.1 imports that is missing there.
- ``DIR/data/many``: compiled from ``--many PATH`` (ALOHA, 40 episodes of 40 frames), for the scaling part.
- ``DIR/data/main``: compiled HEVC at a real camera size: ALOHA sim footage (480x640, benchmarks/render_aloha.py)
  when ``--aloha PATH`` holds it, else synthetic 480x640; ``DIR/data/main-source``: its AV1 LeRobot v3 source,
  for LeRobotDataset; ``DIR/data/small``: synthetic 224x224, compiled; ``DIR/data/prepared.json``: what each is.
- The whole folder travels to the GPU machine with the repository, 64 MiB at most in all: checked at the end.

``--small`` makes tiny data (96x128 and 64x64, a few frames) for the test of ``--cpu-only`` (tests/).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

FOLDER_LIMIT_MB = 64.0
REPO_MB = 3.0  # the tracked tree travels too (about 2 MiB)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "any")
# (requirement, why): one version each (two versions of one package stop the install there)
WHEELS: tuple[tuple[str, str], ...] = (
    ("torchcodec==0.15.0", "CUDA 13.0 build on PyPI; loads with torch 2.11 (stable ABI)"),
    ("av==18.1.0", "PyAV, and the FFmpeg 8.1 libraries torchcodec loads (no FFmpeg there)"),
    ("lerobot==0.6.1", "LeRobotDataset, the baseline"),
    ("datasets==4.8.5", "LeRobotDataset's parquet reading"),
    ("dill==0.4.1", "datasets dependency"),
    ("multiprocess==0.70.19", "datasets dependency"),
    ("draccus==0.11.6", "lerobot configs"),
    ("mergedeep==1.3.4", "draccus dependency"),
    ("toml==0.10.2", "draccus dependency"),
    ("gymnasium==1.4.0", "imported by lerobot"),
    ("farama-notifications==0.0.4", "gymnasium dependency"),
    ("pytz==2025.2", "pandas < 3 dependency, absent there"),
)


def fetch_wheels(dest: Path, python: str) -> list[dict]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for req, why in WHEELS:
        name = req.split("==")[0].replace("-", "_").lower()
        have = [p for p in dest.glob("*.whl") if p.name.lower().startswith(name + "-")]
        if not have:
            cmd = [python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                   "3.12", "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", str(dest), req]
            subprocess.run(cmd, check=True)
            have = [p for p in dest.glob("*.whl") if p.name.lower().startswith(name + "-")]
        out += [{"wheel": p.name, "mb": round(p.stat().st_size / 2**20, 2), "why": why} for p in have]
    return out


def _compile(src: Path, out: Path) -> None:
    from roboreel.compile.pipeline import compile_dataset

    compile_dataset(str(src), str(out), workers=2, overwrite=True)


def _synth(root: Path, **kw) -> None:
    from roboreel.synth import SynthConfig, synthesize

    synthesize(root, SynthConfig(**kw), overwrite=True)


def _size_mb(p: Path) -> float:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**20


def _describe(root: Path, origin: str) -> dict:
    from roboreel.formats.lerobot_v3 import LeRobotSource

    src = LeRobotSource(str(root))
    cams = {k: src.info.features[k].get("shape") for k in src.camera_keys}
    return {"origin": origin, "episodes": len(src.episodes), "frames": sum(e.length for e in src.episodes),
            "cameras": cams, "fps": src.info.fps}


def make_data(data: Path, *, aloha: Path | None, many: Path | None, small: bool, room_mb: float) -> dict:
    """``room_mb``: what the data may take. The ALOHA source is copied whole (LeRobot v3 packs episodes into
    shared files) and its compiled copy is assumed no smaller, so it is taken only if twice its size fits."""
    data.mkdir(parents=True, exist_ok=True)
    src, out = data / "main-source", data / "main"
    for old in (src, data / "many"):  # an earlier prepare's: not counted against the room
        shutil.rmtree(old, ignore_errors=True)
    aloha_mb = _size_mb(aloha) if aloha is not None and (aloha / "meta" / "info.json").exists() else None
    if aloha_mb is not None and 2 * aloha_mb + 2 <= room_mb and not small:
        shutil.copytree(aloha, src)
        origin = f"ALOHA sim footage ({aloha}, benchmarks/render_aloha.py)"
    else:
        why = ("--small" if small else f"no ALOHA render at {aloha}" if aloha_mb is None else
               f"the ALOHA render at {aloha} is {aloha_mb:.1f} MiB: it and its compiled copy exceed the "
               f"{room_mb:.1f} MiB left for data")
        kw = (dict(height=96, width=128, episodes=3, min_length=10, max_length=16) if small else
              dict(height=480, width=640, episodes=6, min_length=150, max_length=150, fps=50))
        _synth(src, cameras=("observation.images.top",), video_files_size_in_mb=50.0, data_files_size_in_mb=5.0,
               **kw)
        origin = f"synthetic ({why})"
    _compile(src, out)
    info = {"main": _describe(src, origin)}
    small_src = data / ".small-source"
    kw = (dict(height=64, width=64, episodes=3, min_length=10, max_length=16) if small else
          dict(height=224, width=224, episodes=6, min_length=60, max_length=60))
    _synth(small_src, video_files_size_in_mb=50.0, data_files_size_in_mb=5.0, **kw)
    _compile(small_src, data / "small")
    info["small"] = _describe(small_src, "synthetic")
    shutil.rmtree(small_src)
    info.update(_make_many(data, many=many, small=small, room_mb=room_mb - _size_mb(data)))
    for k in info:
        info[k]["mb"] = round(_size_mb(data / k), 2)
    info.setdefault("main-source", {})["mb"] = round(_size_mb(src), 2)
    return info


def _make_many(data: Path, *, many: Path | None, small: bool, room_mb: float) -> dict:
    """``data/many``, the scaling part's data: a clip's frames decode in order on one thread, so decode threads
    run at most as many clips at once as the batches in flight hold, about one per pooled episode. 8 episodes
    (``main``) cap that near 8 whatever the threads; this holds enough episodes for 16 threads. From an ALOHA
    render with many short episodes when one fits, tiny synthetic data with ``--small``, else none (scaling then
    runs on ``main`` and says so)."""
    out = data / "many"
    shutil.rmtree(out, ignore_errors=True)
    if small:
        src = data / ".many-source"
        _synth(src, cameras=("observation.images.top",), height=64, width=64, episodes=8, min_length=6,
               max_length=8, video_files_size_in_mb=50.0, data_files_size_in_mb=5.0)
        _compile(src, out)
        info = _describe(src, "synthetic (--small)")
        shutil.rmtree(src)
        return {"many": info}
    if many is None or not (many / "meta" / "info.json").exists():
        return {}
    if _size_mb(many) + 1 > room_mb:  # its compiled copy: about the AV1 source's size or less (checked at the end)
        print(f"note: {many} ({_size_mb(many):.1f} MiB) does not fit the {room_mb:.1f} MiB left: no data/many",
              file=sys.stderr)
        return {}
    _compile(many, out)
    return {"many": _describe(many, f"ALOHA sim footage ({many}, benchmarks/render_aloha.py)")}


def _commit() -> dict:
    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip()

    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain", "--", "roboreel",
                                                                           "scripts"))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--aloha", type=Path, default=Path("data/aloha"),
                   help="an ALOHA render (LeRobot v3, 480x640 AV1; ready when meta/info.json exists)")
    p.add_argument("--many", type=Path, default=Path("data/aloha-many"),
                   help="an ALOHA render with many short episodes, for the scaling part (render_aloha.py "
                        "--episodes 40 --frames 40)")
    p.add_argument("--no-wheels", action="store_true", help="data only (e.g. for --cpu-only here)")
    p.add_argument("--small", action="store_true", help="tiny data, for the test of --cpu-only")
    p.add_argument("--python", default=sys.executable, help="the interpreter whose pip downloads the wheels")
    a = p.parse_args()
    t0 = time.perf_counter()
    a.dir.mkdir(parents=True, exist_ok=True)
    wheels = [] if a.no_wheels else fetch_wheels(a.dir / "wheels", a.python)
    room = FOLDER_LIMIT_MB - REPO_MB - sum(w["mb"] for w in wheels)
    data = make_data(a.dir / "data", aloha=a.aloha, many=a.many, small=a.small, room_mb=room)
    prepared = {"wheels": wheels, "data": data, **_commit(), "prepared_s": round(time.perf_counter() - t0, 1)}
    (a.dir / "data" / "prepared.json").write_text(json.dumps(prepared, indent=1) + "\n")
    total = _size_mb(a.dir)
    print(json.dumps({"dir": str(a.dir), "total_mb": round(total, 1), "wheels_mb": round(sum(w["mb"] for w in wheels), 1),
                      "data": {k: v.get("mb") for k, v in data.items()}}, indent=1))
    if total + REPO_MB > FOLDER_LIMIT_MB:
        print(f"error: {a.dir} holds {total:.1f} MiB; with the repository it exceeds the {FOLDER_LIMIT_MB:.0f} MiB "
              "that may travel with it: use fewer ALOHA episodes or drop optional wheels", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
