"""The GPU check's run mode: every part in its own process with its own timeout, within one overall budget,
results merged into ``OUT/gpu_check.json`` as they are measured, all output in ``OUT/gpu_check.log``.

    python3 scripts/gpu_check/run.py --data DIR/data --out $OUT [--cpu-only] [--budget 520] [--parts a,b]

A part that crashes or times out is recorded under ``parts`` (status, exit code, seconds, the end of its
output) and the next part runs; at the end every schema key still null gets a reason (results.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import results  # noqa: E402


@dataclass(frozen=True)
class Part:
    name: str
    owns: tuple[str, ...]  # result keys (prefixes) it measures, for the reasons of nulls
    timeout_s: float  # on the GPU machine
    seconds: float  # each measurement's window there
    cpu_timeout_s: float = 90.0  # --cpu-only, here
    cpu_seconds: float = 1.0
    needs_gpu: bool = False


# Sized so that the parts' timeouts add up to the 520 s budget of one call (a part ends well inside its timeout:
# the whole run took 270 s on an H200 in 2026-11).
PARTS = (
    Part("env", ("device", "cores"), 40, 0),
    Part("exactness", ("nvdec",), 45, 30, cpu_seconds=10),
    Part("decode", ("decode",), 60, 2.5, cpu_seconds=0.5),
    Part("loader", ("loader",), 110, 12, cpu_seconds=2),
    Part("lerobot", ("lerobot",), 80, 8, cpu_seconds=1.5),
    Part("scaling", ("scaling",), 110, 7, cpu_seconds=1.5),
    Part("tests", ("tests",), 75, 0, needs_gpu=True),
)
MIN_PART_S = 15.0


def _commit(prepared: dict) -> str | None:
    """This checkout's commit, "+dirty" when roboreel/, scripts/ or tests/ differ from it (a tree copied onto an
    older clone: then the commit --prepare saw, from prepared.json, says what ran); without git, that one."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        except OSError:
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if head:
        return head + ("+dirty" if git("status", "--porcelain", "--", "roboreel", "scripts", "tests") else "")
    c = prepared.get("commit")
    return f"{c}{'+dirty' if prepared.get('dirty') else ''} (from prepared.json)" if c else None


def _run(cmd: list[str], *, timeout: float, log: Path, env: dict | None = None) -> tuple[str, int | None, str]:
    """(status, exit code, output tail) of ``cmd`` in its own process group, killed whole at ``timeout``."""
    with open(log, "a") as f:
        shown = " ".join(cmd).replace(str(ROOT) + os.sep, "").replace(str(log.parent), "$OUT")  # no host paths
        f.write(f"\n===== {shown} (timeout {timeout:.0f} s)\n")
        f.flush()
        start = f.tell()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True, env=env)
        try:
            rc = proc.wait(timeout=timeout)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc, status = proc.wait(), "timeout"
    with open(log) as f:
        f.seek(start)
        tail = f.read()[-2000:]
    return status, rc, tail


def _pytest(out: Path, timeout: float, log: Path) -> tuple[str, int | None, str, dict]:
    xml = out / "pytest.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "needs_cuda",
           "tests/test_reader_gpu.py", "tests/test_doctor.py", "tests/test_unit_float.py", f"--junitxml={xml}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    status, rc, tail = _run(cmd, timeout=timeout, log=log, env=env)
    summary: dict = {}
    if xml.exists():
        root = ET.parse(xml).getroot()
        cases = root.iter("testcase")
        summary = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "failures": []}
        for c in cases:
            kinds = {child.tag for child in c}
            key = "failed" if "failure" in kinds else "errors" if "error" in kinds else \
                "skipped" if "skipped" in kinds else "passed"
            summary[key] += 1
            if key in ("failed", "errors"):
                summary["failures"].append(f"{c.get('classname')}::{c.get('name')}")
    status = "ok" if rc in (0, 5) and status != "timeout" else status  # 5: none collected
    return status, rc, tail, summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cpu-only", action="store_true")
    p.add_argument("--budget", type=float, default=520.0, help="seconds for all parts together")
    p.add_argument("--parts", default=None, help="comma-separated subset of: " + ",".join(x.name for x in PARTS))
    p.add_argument("--lerobot-python", default=sys.executable, help="interpreter for the lerobot part")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    res, log = a.out / "gpu_check.json", a.out / "gpu_check.log"
    log.write_text("")
    prepared = json.loads((a.data / "prepared.json").read_text()) if (a.data / "prepared.json").exists() else {}
    results.init(res, {"mode": "cpu-only" if a.cpu_only else "gpu",
                       "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                       "commit": _commit(prepared), "prepared_commit": prepared.get("commit"),
                       "data": prepared.get("data"),
                       "wheels": [w["wheel"] for w in prepared.get("wheels", [])]})
    chosen = set(a.parts.split(",")) if a.parts else {x.name for x in PARTS}
    deadline = time.monotonic() + a.budget
    why_null: dict[str, str] = {}
    for part in PARTS:
        t0 = time.monotonic()
        left = deadline - t0
        timeout = min(part.cpu_timeout_s if a.cpu_only else part.timeout_s, left)
        record: dict = {"timeout_s": round(timeout, 1)}
        if part.name not in chosen:
            record["status"], reason = "skipped", f"part {part.name} not chosen (--parts)"
        elif a.cpu_only and part.needs_gpu:
            record["status"], reason = "skipped", f"part {part.name} needs a GPU: --cpu-only run"
        elif timeout < MIN_PART_S:
            record["status"], reason = "skipped", f"part {part.name}: no time left in the {a.budget:.0f} s budget"
        else:
            if part.name == "tests":
                status, rc, tail, summary = _pytest(a.out, timeout, log)
                results.merge(res, {"tests": summary or None},
                              reasons=None if summary else {"tests": f"pytest wrote no report ({status})"})
            else:
                py = a.lerobot_python if part.name == "lerobot" else sys.executable
                cmd = [py, str(HERE / f"part_{part.name}.py"), "--data", str(a.data), "--results", str(res),
                       "--seconds", str(part.cpu_seconds if a.cpu_only else part.seconds)]
                status, rc, tail = _run(cmd + (["--cpu-only"] if a.cpu_only else []), timeout=timeout, log=log)
            record.update(status=status, rc=rc, tail=tail if status != "ok" else tail[-300:])
            reason = {"ok": f"part {part.name} ran but did not measure it",
                      "failed": f"part {part.name} failed (exit {rc}): see parts.{part.name}.tail",
                      "timeout": f"part {part.name} timed out after {timeout:.0f} s"}[status]
        record["seconds"] = round(time.monotonic() - t0, 1)
        results.merge(res, {f"parts.{part.name}": record})
        why_null.update({k: reason for k in part.owns})
        print(f"[gpu_check] {part.name}: {record['status']} in {record['seconds']} s", flush=True)
    results.explain_nulls(res, why_null)
    d = json.loads(res.read_text())
    print(json.dumps({k: results.get(d, k) for k in results.SCHEMA if k != "scaling"}, indent=1))
    print("scaling:", json.dumps(d.get("scaling")))
    return 0 if all(v.get("status") in ("ok", "skipped") for v in d["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
