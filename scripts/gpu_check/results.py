"""The results file of the GPU check, ``$OUT/gpu_check.json``: its schema, and merging into it as parts go.

Every part runs in its own process and merges what it measured the moment it has it (a lock, then a write to a
temporary file renamed over the old one), so a part that crashes or runs out of time loses only what it had not
written yet. Keys are dotted paths into the nested JSON (``"nvdec.frames"`` is ``d["nvdec"]["frames"]``). The run
ends by giving every key of ``SCHEMA`` still null a reason in ``null_reasons``: a number is either measured on the
machine that ran the check or absent with a reason, never invented.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

FORMAT = "roboreel.gpu_check"
VERSION = 1

# The keys every results file holds (docs/gpu.md, "The node check"); parts add details beside them.
SCHEMA: tuple[str, ...] = (
    "device", "cores", "date", "commit",
    "nvdec.frames", "nvdec.cpu_fallback_frames", "nvdec.psnr_min_vs_cpu",
    "decode.nvdec_fps", "decode.cpu_fps_all_cores",
    "loader.nvdec_samples_per_s", "loader.cpu_samples_per_s",
    "loader.nvdec_cpu_ms_per_sample", "loader.cpu_cpu_ms_per_sample",
    "lerobot.samples_per_s", "lerobot.num_workers",
    "scaling",
)


def get(d: Mapping[str, Any], key: str) -> Any:
    for part in key.split("."):
        if not isinstance(d, Mapping) or part not in d:
            return None
        d = d[part]
    return d


def put(d: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    for part in parents:
        d = d.setdefault(part, {})
    d[leaf] = value


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict[str, Any]]:
    """The file's content under an exclusive lock; what the block leaves in the dict is written back atomically."""
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {}
        yield data
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
        os.replace(tmp, path)


def init(path: Path, header: Mapping[str, Any]) -> None:
    """A fresh results file: every schema key null, then ``header`` (mode, date, commit, ...)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with _locked(path) as d:
        d.update({"format": FORMAT, "version": VERSION})
        for key in SCHEMA:
            put(d, key, [] if key == "scaling" else None)
        for key, value in header.items():
            put(d, key, value)
        d["null_reasons"], d["parts"] = {}, {}


def merge(path: Path, values: Mapping[str, Any], *, reasons: Mapping[str, str] | None = None) -> None:
    """Set dotted keys to values (a value of None needs a reason in ``reasons``); measured keys lose old reasons."""
    with _locked(path) as d:
        for key, value in values.items():
            put(d, key, value)
            if value is not None:
                d.setdefault("null_reasons", {}).pop(key, None)
        for key, why in (reasons or {}).items():
            d.setdefault("null_reasons", {})[key] = why


def append(path: Path, key: str, item: Any) -> None:
    """Append to a list at ``key`` (e.g. one ``scaling`` entry as soon as it is measured)."""
    with _locked(path) as d:
        cur = get(d, key)
        put(d, key, [*(cur or []), item])


def explain_nulls(path: Path, why: Mapping[str, str]) -> None:
    """Give each schema key still null (or an empty ``scaling``) a reason: ``why`` maps a key prefix (the part
    that owns it) to the reason; keys with a reason already keep it."""
    with _locked(path) as d:
        reasons = d.setdefault("null_reasons", {})
        for key in SCHEMA:
            if get(d, key) not in (None, []) or key in reasons:
                continue
            owner = next((why[p] for p in sorted(why, key=len, reverse=True) if key == p or key.startswith(p + ".")),
                         "no part measured it")
            reasons[key] = owner
