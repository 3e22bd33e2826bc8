"""Run one benchmark run in another Python (e.g. LeRobot's own venv) and get its metrics back.

The real LeRobot pins libraries (av < 16) that roboreel's encoder cannot live with, so it has its own venv. The
``lerobot`` reader then runs there: a child interpreter imports this roboreel (put first on its PYTHONPATH),
builds ``LeRobotDataset`` exactly as in-process runs do, measures with the same ``run_one`` (its own process tree:
peak RSS, CPU time) and prints the result as JSON. Runs stay alternated with the other readers because the
suite calls this in its usual order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from roboreel.bench.config import RunConfig
from roboreel.bench.runner import BenchError

_MARK = "ROBOREEL-BENCH-RESULT "
TIMEOUT_S = 3600  # one run in another interpreter; a hang ends here with the child's stderr


def run_external(python: str, reader: str, mode: str, *, compiled: str, source: str, cfg: RunConfig,
                 where: str = "local", repeat: int = 0) -> dict[str, Any]:
    """``run_one(...)`` executed by ``python``; raises BenchError with the child's stderr tail if it fails."""
    job = {"reader": reader, "mode": mode, "compiled": compiled, "source": source, "cfg": asdict(cfg),
           "where": where, "repeat": repeat}
    root = str(Path(__file__).resolve().parents[2])  # the directory holding this roboreel package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([python, "-m", "roboreel.bench.external"], input=json.dumps(job), text=True,
                          capture_output=True, env=env, timeout=TIMEOUT_S, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise BenchError(f"{reader}/{mode} in {python} failed (exit {proc.returncode}):\n{tail}")
    res = json.loads(lines[-1][len(_MARK):])
    res["python"] = python
    return res


def main() -> int:
    from roboreel.bench.runner import run_one

    job = json.loads(sys.stdin.read())
    res = run_one(job["reader"], job["mode"], compiled=job["compiled"], source=job["source"],
                  cfg=RunConfig(**job["cfg"]), where=job["where"], repeat=job["repeat"])
    print(_MARK + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
