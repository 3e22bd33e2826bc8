"""scripts/gpu_check.sh, the one-call check for a lent GPU machine, exercised here the only way a CPU machine can:
``--prepare --small --no-wheels`` makes real compiled data, ``--cpu-only`` runs every part that needs no GPU,
each in its own process, and the results file must hold measured CPU numbers, the GPU keys null with a reason,
and the harness's own exactness check (torchcodec's CPU decode against PyAV's, every frame). A part that crashes
on bad data must lose only itself. Timings here mean nothing (2 shared cores); only their presence is checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
sys.path.insert(0, str(ROOT / "scripts" / "gpu_check"))
import results  # noqa: E402

GPU_KEYS = ("nvdec.frames", "nvdec.cpu_fallback_frames", "nvdec.psnr_min_vs_cpu", "decode.nvdec_fps",
            "loader.nvdec_samples_per_s", "loader.nvdec_cpu_ms_per_sample")


def _sh(*args: str, out: Path | None = None, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "SVT_LOG": "1"}
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gpu_check")
    r = _sh("--prepare", str(d), "--no-wheels", "--small", "--aloha", str(d / "no-aloha"))
    assert r.returncode == 0, r.stderr[-3000:]
    return d


def test_prepare_makes_compiled_data_and_its_description(prepared):
    info = json.loads((prepared / "data" / "prepared.json").read_text())
    assert info["wheels"] == [] and info["commit"]
    main, small = info["data"]["main"], info["data"]["small"]
    assert main["origin"].startswith("synthetic (--small)") and main["cameras"] == {"observation.images.top": [96, 128, 3]}
    assert len(small["cameras"]) == 2
    assert info["data"]["many"]["episodes"] == 8 and info["data"]["many"]["mb"] > 0
    for name in ("main", "small", "many"):
        assert (prepared / "data" / name / "roboreel.json").exists()
    assert (prepared / "data" / "main-source" / "meta" / "info.json").exists()
    assert not (prepared / "data" / ".small-source").exists() and not (prepared / "data" / ".many-source").exists()


@pytest.mark.slow  # every part of the check on the CPU (~30 s on 2 cores); CI runs it (-m slow)
def test_cpu_only_fills_what_a_cpu_can_and_explains_every_null(prepared, tmp_path):
    r = _sh("--cpu-only", "--data", str(prepared), out=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads((tmp_path / "gpu_check.json").read_text())
    assert d["format"] == "roboreel.gpu_check" and d["mode"] == "cpu-only"
    assert {k: v["status"] for k, v in d["parts"].items()} == {
        "env": "ok", "exactness": "ok", "decode": "ok", "loader": "ok", "lerobot": "ok", "scaling": "ok",
        "tests": "skipped"}
    assert d["cores"] == len(os.sched_getaffinity(0)) and d["device"] is None
    for key in GPU_KEYS + ("device",):
        assert results.get(d, key) is None and "--cpu-only" in d["null_reasons"][key], key
    for key in ("decode.cpu_fps_all_cores", "loader.cpu_samples_per_s", "loader.cpu_cpu_ms_per_sample"):
        assert results.get(d, key) > 0, key
    for key in results.SCHEMA:  # every key is measured or says why not
        assert results.get(d, key) not in (None, []) or key in d["null_reasons"], key
    # every frame of every prepared clip: torchcodec's CPU decode against PyAV's, same pts, same pixels
    data = d["data"]
    ex = d["exactness_cpu"]
    assert ex["frames"] == data["main"]["frames"] + 2 * data["small"]["frames"]
    assert ex["pts_equal"] is True and ex["psnr_min"] == "inf" and not ex["cut_short"]
    assert [s["decode_threads"] for s in d["scaling"]] == [1, 2]
    assert d["scaling_info"]["data"] == "many" and d["scaling_info"]["workers"] == 2
    for s in d["scaling"]:
        assert s["samples_per_s"] > 0 and 0 <= s["gil"]["held_share"] <= 1 and s["gil"]["samples"] > 0
        # 2 workers, 4 of the 8 episodes each, 5 where the split cut one in two (all pooled): 5 clips at most a
        # worker, and a batch takes its share from both (mix_workers): 10 at most
        par = s["decode_parallelism"]
        assert s["data"] == "many" and 1 <= par["clips_per_batch"] <= 10 and par["clips_in_flight"] >= 0
        # the decode threads' own clocks: part of the training process's CPU per sample
        assert 0 < s["decode_threads_cpu_ms_per_sample"] <= s["cpu_ms_per_sample"] * 1.5  # published every 0.2 s
    assert d["loader"]["cpu"]["decode_parallelism"]["clips_per_batch"] >= 1
    assert d["doctor"]["exit_code"] == 0 and d["doctor"]["nvdec_library"]["library"] == "libnvcuvid.so.1"
    if d["lerobot"]["samples_per_s"] is None:  # LeRobot lives in its own venv (run.py --lerobot-python)
        assert "LeRobot is not importable" in d["null_reasons"]["lerobot.samples_per_s"]


def test_a_crashing_part_loses_only_itself(prepared, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(prepared / "data", broken / "data")
    for shard in (broken / "data" / "small").rglob("*.tar"):
        shard.unlink()  # the decode part measures "main", then finds no clips in "small" and dies
    r = _sh("--cpu-only", "--data", str(broken), "--parts", "decode,loader", out=tmp_path / "out")
    assert r.returncode == 1
    d = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    decode, loader = d["parts"]["decode"], d["parts"]["loader"]
    assert decode["status"] == "failed" and "no .mp4 clips in the shards" in decode["tail"]
    assert d["decode"]["cpu_fps_all_cores"] > 0  # measured before the crash, kept
    assert loader["status"] == "ok" and d["loader"]["cpu_samples_per_s"] > 0
    assert d["parts"]["env"]["status"] == "skipped" and "not chosen" in d["null_reasons"]["cores"]


_LEROBOT_STYLE = '''
import av


def _get_codec_options_by_name(vcodec: str) -> dict[str, av.option.Option]:  # as lerobot/datasets/pyav_utils.py
    return {}
'''


def test_pyav_shim_lets_a_lerobot_style_module_import_beside_pyav_18(tmp_path):
    """LeRobot 0.6.1 annotates with ``av.option.Option`` at import; PyAV 18 (what travels to the node) has no
    ``av.option``. Without the stand-in such a module fails to import; with it, it imports, and a second install
    adds nothing."""
    mod = tmp_path / "lerobot_style.py"
    mod.write_text(_LEROBOT_STYLE)
    code = (
        "import sys, importlib, av\n"
        f"sys.path[:0] = [{str(tmp_path)!r}, {str(ROOT / 'scripts' / 'gpu_check')!r}]\n"
        "needed = not hasattr(av, 'option')\n"
        "if needed:\n"
        "    try:\n"
        "        importlib.import_module('lerobot_style')\n"
        "        raise SystemExit('imported without the stand-in')\n"
        "    except AttributeError:\n"
        "        sys.modules.pop('lerobot_style', None)\n"
        "import pyavshim\n"
        "assert pyavshim.install() is needed, 'install() must add the module exactly when av lacks it'\n"
        "assert pyavshim.install() is False\n"
        "importlib.import_module('lerobot_style')\n"
        "print('needed' if needed else 'not needed')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    import av

    if int(av.__version__.split(".")[0]) >= 18:  # PyAV 18, what travels to the node: the stand-in is needed
        assert r.stdout.strip() == "needed"
