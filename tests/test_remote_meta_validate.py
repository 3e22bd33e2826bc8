"""Transient faults on metadata and under ``roboreel validate``, over http:// from the fault-injecting server
(tests/support/httpserver.py; a plain server without directory listings, as a static file host is).

A transient fault (a 503, HEAD and GET alike) is retried with the dataset's budget: ``meta.stats`` is the local
one, and validate's report is the local one. Beyond the budget the file is named as unreadable, never as
missing (fsspec's HTTP ``exists`` and ``info`` answer a failed request as "not there").
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from support.httpserver import Faults, FaultyServer

from roboreel.formats.errors import ShardReadError
from roboreel.formats.lerobot_v3 import STATS_PATH, LeRobotSource
from roboreel.formats.transient import Retry
from roboreel.reader.meta import DatasetMeta
from roboreel.validate import validate


def once(path: str) -> Faults:
    """A 503 on the first HEAD and GET of ``path`` (fsspec's info() tries both before it gives up)."""
    return Faults(unavailable=1.0, path_prefix=path, max_faults_per_path=2, head=True)


def always(path: str) -> Faults:
    return Faults(unavailable=1.0, path_prefix=path, head=True)


def same_stats(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].keys() == b[key].keys()
        for stat in a[key]:
            np.testing.assert_array_equal(a[key][stat], b[key][stat])


def outcome(report) -> tuple:
    return report.exit_code, report.kind, [f.to_dict() for f in report.findings], dict(report.checked)


@pytest.fixture(scope="module")
def local_reports(small_source, small_compiled) -> dict[str, tuple]:
    return {"source": outcome(validate(str(small_source))), "compiled": outcome(validate(str(small_compiled)))}


def first_mp4(root: Path) -> str:
    ep = LeRobotSource(str(root)).episodes[0]
    return "/" + next(iter(ep.videos.values())).path


def first_shard(root: Path) -> str:
    return "/" + sorted(p.relative_to(root).as_posix() for p in (root / "shards").glob("*.tar"))[0]


# -- meta.stats ----------------------------------------------------------------------------------------------
def test_one_transient_fault_on_stats_is_retried(small_compiled) -> None:
    local = DatasetMeta(str(small_compiled)).stats
    assert local is not None
    with FaultyServer(small_compiled, faults=once("/meta/stats.json")) as server:
        remote = DatasetMeta(server.url, retry=Retry(5, 0.01)).stats
        faulted = [r for r in server.log if r.fault]
    assert [r.method for r in faulted] == ["HEAD", "GET"]  # the fault did happen, on both requests
    assert remote is not None
    same_stats(remote, local)


def test_stats_failing_beyond_the_budget_raise_naming_the_file(small_compiled) -> None:
    with FaultyServer(small_compiled, faults=always("/meta/stats.json")) as server:
        meta = DatasetMeta(server.url, retry=Retry(2, 0.01))
        with pytest.raises(ShardReadError, match=r"kept failing \(3 attempts\).*meta/stats\.json"):
            _ = meta.stats


def test_stats_really_missing_is_none_at_once(small_compiled, tmp_path) -> None:
    copy = shutil.copytree(small_compiled, tmp_path / "copy")
    (copy / STATS_PATH).unlink()
    with FaultyServer(copy) as server:
        assert DatasetMeta(server.url, retry=Retry(5, 0.01)).stats is None
        assert all(r.status == 404 for r in server.log)  # a 404 is not retried: one HEAD, one GET


# -- validate --------------------------------------------------------------------------------------------------
def test_validate_over_http_without_listings_equals_local(small_source, small_compiled, local_reports) -> None:
    for kind, root in (("source", small_source), ("compiled", small_compiled)):
        with FaultyServer(root) as server:
            assert outcome(validate(server.url)) == local_reports[kind]
        assert local_reports[kind][0] == 0


def test_validate_names_an_unfinished_compile_served_without_listings(small_compiled, tmp_path) -> None:
    """A compile that has not finished (no roboreel.json yet) is reported as such, locally and served by a server
    without directory listings (not as a path that does not exist), before finalize and during it (meta/
    written, roboreel.json not yet: not a LeRobot source)."""
    half = shutil.copytree(small_compiled, tmp_path / "half")
    (half / "roboreel.json").unlink()
    reports = [validate(str(half))]
    with FaultyServer(half) as server:
        reports.append(validate(server.url))
    shutil.rmtree(half / "meta")
    shutil.rmtree(half / "index")
    reports.append(validate(str(half)))
    with FaultyServer(half) as server:
        reports.append(validate(server.url))
    assert [(r.exit_code, [f.code for f in r.findings]) for r in reports] == [(2, ["manifest-missing"])] * 4


@pytest.mark.parametrize("target", ["info", "mp4"])
def test_validate_source_retries_a_transient_fault(small_source, local_reports, target) -> None:
    path = {"info": "/meta/info.json", "mp4": first_mp4(small_source)}[target]
    with FaultyServer(small_source, faults=once(path)) as server:
        report = validate(server.url, retry=Retry(backoff_s=0.01))
        assert server.faults_injected() == {"unavailable": 2}
    assert outcome(report) == local_reports["source"]


@pytest.mark.parametrize("target", ["manifest", "info", "shard"])
def test_validate_compiled_retries_a_transient_fault(small_compiled, local_reports, target) -> None:
    path = {"manifest": "/roboreel.json", "info": "/meta/info.json", "shard": first_shard(small_compiled)}[target]
    with FaultyServer(small_compiled, faults=once(path)) as server:
        report = validate(server.url, retry=Retry(backoff_s=0.01))
        assert server.faults_injected() == {"unavailable": 2}
    assert outcome(report) == local_reports["compiled"]


@pytest.mark.parametrize("kind,target", [("source", "info"), ("source", "mp4"), ("compiled", "shard")])
def test_validate_names_a_file_failing_beyond_the_budget_unreadable(small_source, small_compiled, kind,
                                                                     target) -> None:
    root = small_source if kind == "source" else small_compiled
    path = {"info": "/meta/info.json", "mp4": first_mp4(small_source), "shard": first_shard(small_compiled)}[target]
    with FaultyServer(root, faults=always(path)) as server:
        report = validate(server.url, retry=Retry(2, 0.01))
    assert report.exit_code == 2
    codes = {f.code for f in report.findings}
    assert "file-unreadable" in codes and not {c for c in codes if c.endswith("-missing")}
    (finding,) = [f for f in report.findings if f.code == "file-unreadable"]
    assert finding.file == path.lstrip("/")
    assert "kept failing (3 attempts)" in finding.message and "503" in finding.message


def test_validate_cli_over_http(small_source, capsys) -> None:
    from roboreel.cli import main

    with FaultyServer(small_source, faults=once("/meta/info.json")) as server:
        assert main(["validate", server.url]) == 0
    capsys.readouterr()
    with FaultyServer(small_source, faults=always(first_mp4(small_source))) as server:
        assert main(["validate", server.url]) == 2  # the default budget: 5 retries from 0.2 s, about 6 s
    out = capsys.readouterr().out
    assert "file-unreadable" in out and "video-missing" not in out


# -- hf:// offline ---------------------------------------------------------------------------------------------
def test_hf_offline_is_one_line_exit_2(tmp_path) -> None:
    """HF_HUB_OFFLINE=1 is a setting, not a fault: one line naming the dataset, exit 2, nothing retried or
    written (huggingface_hub reads the variable on import, hence a fresh process)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = tmp_path / "out"
    for args in (["compile", "hf://datasets/lerobot/pusht", str(out), "--no-progress"],
                 ["validate", "hf://datasets/lerobot/pusht"]):
        done = subprocess.run([sys.executable, "-m", "roboreel.cli", *args], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith(f"roboreel {args[0]}: error: ") and "offline mode is enabled" in done.stderr
    assert not out.exists()


# -- validate as users run it -----------------------------------------------------------------------------------
def test_validate_exits_cleanly_as_a_process_again_and_again(small_source, small_compiled) -> None:
    """``roboreel validate`` as its own process, over and over, locally and over HTTP (fsspec's event loop thread,
    torchcodec's decoders): exit 0 and nothing on stderr every time, no abort at interpreter exit."""
    import subprocess
    import sys

    with FaultyServer(small_compiled) as compiled, FaultyServer(small_source) as source:
        targets = [str(small_compiled), compiled.url, source.url]
        for k in range(6):
            args = [sys.executable, "-m", "roboreel.cli", "validate", targets[k % 3], *(["--deep"] if k < 3 else [])]
            done = subprocess.run(args, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0 and done.stderr == "", (args, done.returncode, done.stderr)
