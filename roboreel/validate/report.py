"""Findings and the report that collects them: the one model both checkers write and both renderings read.

A finding is one violation at one place (file, row group, episode), with a short stable ``code`` that scripts
can match on. Severity decides the exit code:

- ``fatal``: the input cannot be read as a dataset at all (path missing, not a dataset, info.json or manifest
  unreadable, unsupported or newer format version). Checking stops; exit 2.
- ``error``: the dataset is readable but violates the format. Exit 1.
- ``warning``: legal but worth knowing (e.g. shards that do not divide over world_size x num_workers). Exit 0,
  or 1 under ``strict``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["fatal", "error", "warning"]
Kind = Literal["source", "compiled", "unknown"]

EXIT_CLEAN, EXIT_VIOLATIONS, EXIT_UNREADABLE = 0, 1, 2

# Every code a checker may emit, with what it means. Codes are stable: scripts and tests match on them.
CODES: dict[str, str] = {
    # unreadable input (fatal)
    "path-missing": "the path does not exist",
    "not-a-dataset": "neither meta/info.json (LeRobot v3) nor roboreel.json (compiled) is there",
    "info-unreadable": "meta/info.json is not JSON, not an object, or lacks fps/features",
    "version-unsupported": "meta/info.json codebase_version is not v3.0",
    "manifest-missing": "shards/ or the compile record exists but roboreel.json does not: compile did not finish",
    "manifest-unreadable": "roboreel.json is not JSON or not a well-formed manifest",
    "manifest-version": "roboreel.json was written by a newer (or unknown) roboreel format version",
    "index-missing": "an index file roboreel.json names (index/...) does not exist",
    "index-checksum-mismatch": "an index file's size or sha256 differs from roboreel.json",
    "index-unreadable": "an index file cannot be read, lacks columns, or its rows are out of order",
    "file-unreadable": "a remote file kept failing with transient faults (5xx, 429, resets, timeouts) beyond the "
                       "retry budget, or its server refused it with an HTTP error other than not-found",
    # LeRobot v3 metadata
    "tasks-unreadable": "meta/tasks.parquet is missing or unreadable",
    "stats-unreadable": "meta/stats.json is not a JSON object",
    "episodes-meta-unreadable": "meta/episodes files are missing, unreadable or lack columns",
    "episode-meta-range": "dataset_to_index - dataset_from_index disagrees with length (or length <= 0)",
    "episode-meta-duplicate": "an episode is listed twice in meta/episodes",
    "episode-index-gap": "an episode's dataset_from_index is not the previous episode's dataset_to_index",
    "info-totals": "info.json total_episodes/total_frames disagree with meta/episodes",
    # data parquet
    "data-file-missing": "a data parquet named by meta/episodes does not exist",
    "data-file-unreadable": "a data parquet cannot be read",
    "data-columns-missing": "a data parquet lacks feature columns from info.json",
    "task-index-unknown": "a data row's task_index is not in meta/tasks.parquet",
    "data-null": "a numeric feature's value is null (or holds a null) in a data row: LeRobot returns None there",
    "data-columns-undeclared": "a data parquet has columns info.json does not declare as features",
    "data-column-type": "a data parquet column is not the dtype kind (bool, integer, float) or shape info.json "
                        "declares",
    "rowgroup-multi-episode": "a row group holds rows of several episodes",
    "episode-split-rowgroups": "an episode's rows are spread over several row groups",
    "episode-rows-missing": "an episode in meta/episodes has no rows in the data",
    "episode-not-in-meta": "the data holds rows of an episode meta/episodes does not list",
    "episode-wrong-file": "an episode's rows are not in the data file meta/episodes names",
    "image-feature-invalid": "an image feature's rows lack embedded image bytes, cannot be decoded, or are not the "
                             "shape info.json declares",
    "episode-length-mismatch": "an episode's row count disagrees with its length",
    "episode-index-mismatch": "an episode's index is not dataset_from_index..to_index-1 or frame_index not 0..n-1",
    "timestamp-mismatch": "a row's timestamp is not frame_index / fps (within 1e-4 s): its video frame cannot be found",
    # source videos
    "video-missing": "an mp4 named by meta/episodes does not exist",
    "video-unreadable": "an mp4 cannot be opened or demuxed",
    "video-too-short": "an mp4 has fewer frames than the episode spans it hosts",
    "video-span-mismatch": "(to_timestamp - from_timestamp) * fps disagrees with the episode length",
    "video-timestamp": "an episode's frame is not within LeRobot's tolerance of from_timestamp + k/fps",
    "video-codec-mismatch": "an mp4's codec or size disagrees with info.json",
    "video-streams": "an mp4 holds more than one video stream",
    "video-rotation": "an mp4's frames carry a display rotation (LeRobot returns them rotated)",
    "video-fps-mismatch": "an mp4's frames are not 1/fps apart (its frame rate disagrees with info.json's fps)",
    # compiled
    "meta-missing": "a compiled dataset without meta/info.json (LeRobot cannot open its data/), or without a meta/ "
                    "file roboreel.json records",
    "meta-checksum": "a meta/ file's sha256 differs from the one roboreel.json recorded (stats.json: normalization)",
    "meta-manifest-mismatch": "meta/episodes and roboreel.json disagree on an episode's length or indices",
    "manifest-inconsistent": "roboreel.json or its index contradicts itself (shard numbers, episode lists, ranges)",
    "shard-missing": "a shard listed in the manifest does not exist",
    "shard-size-mismatch": "a shard's byte size differs from the manifest",
    "shard-checksum-mismatch": "a shard's sha256 differs from the manifest",
    "shard-unexpected": "a shard file under shards/ that the manifest does not list",
    "shard-truncated": "a shard's tar ends early (cut mid-member or without its end-of-archive marker)",
    "record-missing": "an episode the manifest puts in a shard is not in it",
    "record-unexpected": "a shard holds a record the manifest does not put there",
    "record-duplicate": "an episode's members are not adjacent in the tar, so it reads as two records",
    "record-order": "a shard's records are not in the manifest's order",
    "record-unreadable": "a record's json or parquet member cannot be parsed",
    "record-meta-mismatch": "a record's json disagrees with the manifest (length, indices)",
    "member-missing": "a member the manifest lists is not in the shard",
    "member-unexpected": "a shard member the manifest does not list",
    "member-size-mismatch": "a member's byte size differs from the manifest",
    "member-checksum-mismatch": "a member's sha256 differs from the manifest",
    "rows-rowgroups": "a record's parquet does not hold exactly one row group",
    "rows-mismatch": "a record's rows are not the episode's frames from_index..to_index-1 in order",
    "rows-digest": "a record's rows (or the episode's rows in data/) hash differently from the manifest's rows_sha256",
    "rows-digest-v1": "an old (v1) rows digest differs; v1 also hashed schema metadata, so values may be intact",
    "clip-missing": "a record lacks the clip of a manifest camera",
    "clip-unreadable": "a clip cannot be demuxed",
    "clip-frame-count": "a clip's frame count differs from the episode length",
    "clip-codec": "a clip's codec or size differs from the manifest's camera spec",
    "clip-timestamp": "a clip's frame k is not at k/fps (within 1e-4 s): the reader refuses it",
    # clips against their feature (validate/cameras.py)
    "clip-channels": "a clip (error; a source mp4: warning) has not its feature's channels (3 RGB, 1 depth map)",
    "clip-bit-depth": "a clip's bit depth is not its feature's (8-bit RGB, 12-bit depth codes)",
    "clip-shape": "a clip's frame size is not its feature's shape",
    "depth-lossy": "a depth feature is stored lossy (not lossless gray12le): its depth values are lost",
    "shards-uneven": "the shard count does not divide evenly over world_size x num_workers",
}


@dataclass(frozen=True)
class Finding:
    """One violation at one place. ``episodes`` lists the episodes involved when there are several."""

    severity: Severity
    code: str
    message: str
    file: str | None = None
    episode: int | None = None
    row_group: int | None = None
    episodes: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"severity": self.severity, "code": self.code, "message": self.message}
        for key in ("file", "episode", "row_group"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        if self.episodes is not None:
            d["episodes"] = list(self.episodes)
        return d

    def line(self) -> str:
        where = []
        if self.file is not None:
            where.append(self.file)
        if self.row_group is not None:
            where.append(f"row group {self.row_group}")
        if self.episode is not None:
            where.append(f"episode {self.episode}")
        if self.episodes is not None:
            where.append("episodes " + _ranges(self.episodes))
        return f"{self.severity.upper():7} {self.code}: {self.message}" + (f" [{', '.join(where)}]" if where else "")


def _ranges(values: tuple[int, ...], limit: int = 12) -> str:
    """``(1, 2, 3, 7)`` -> ``"1-3, 7"``; long lists are cut with a count of the rest."""
    vals = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        parts.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    if len(parts) > limit:
        return ", ".join(parts[:limit]) + f", ... ({len(parts) - limit} more)"
    return ", ".join(parts)


@dataclass
class Report:
    """What one ``validate`` run found. ``checked`` counts what was looked at (episodes, row groups, ...)."""

    path: str
    kind: Kind = "unknown"
    strict: bool = False
    findings: list[Finding] = field(default_factory=list)
    checked: Counter = field(default_factory=Counter)

    def add(self, severity: Severity, code: str, message: str, **where: Any) -> Finding:
        if code not in CODES:
            raise ValueError(f"unknown finding code {code!r}; known: {sorted(CODES)}")
        if where.get("episodes") is not None:
            where["episodes"] = tuple(int(e) for e in where["episodes"])
        f = Finding(severity, code, message, **where)
        self.findings.append(f)
        return f

    def fatal(self, code: str, message: str, **where: Any) -> Finding:
        return self.add("fatal", code, message, **where)

    def error(self, code: str, message: str, **where: Any) -> Finding:
        return self.add("error", code, message, **where)

    def warning(self, code: str, message: str, **where: Any) -> Finding:
        return self.add("warning", code, message, **where)

    def count(self, severity: Severity) -> int:
        return sum(f.severity == severity for f in self.findings)

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    @property
    def exit_code(self) -> int:
        if self.count("fatal"):
            return EXIT_UNREADABLE
        if self.count("error") or (self.strict and self.count("warning")):
            return EXIT_VIOLATIONS
        return EXIT_CLEAN

    @property
    def verdict(self) -> str:
        return {EXIT_CLEAN: "clean", EXIT_VIOLATIONS: "violations", EXIT_UNREADABLE: "unreadable"}[self.exit_code]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "strict": self.strict,
            "counts": {s: self.count(s) for s in ("fatal", "error", "warning")},
            "checked": dict(sorted(self.checked.items())),
            "findings": [f.to_dict() for f in self.findings],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"

    def to_text(self) -> str:
        lines = [f.line() for f in self.findings]
        checked = ", ".join(f"{n} {k}" for k, n in sorted(self.checked.items()))
        counts = f"{self.count('error')} errors, {self.count('warning')} warnings"
        if self.count("fatal"):
            counts = "unreadable input"
        lines.append(f"{self.verdict.upper()}: {self.path} ({self.kind}): {counts}" + (f"; checked {checked}" if checked else ""))
        return "\n".join(lines) + "\n"
