"""Validate a LeRobot v3 dataset or a compiled roboreel dataset, reporting every violation with its place.

``validate(path)`` never raises for a bad dataset: it returns a ``Report`` whose findings name file, row group
and episode, and whose ``exit_code`` is 0 (clean; warnings allowed), 1 (violations) or 2 (unreadable input).
This package imports ``roboreel.formats`` only, so it can judge the compiler's and the reader's work alike.
"""

from __future__ import annotations

from typing import Any

from roboreel.formats.lerobot_v3_layout import INFO_PATH
from roboreel.formats.manifest import COMPILE_RECORD_NAME, MANIFEST_NAME
from roboreel.formats.shard import SHARD_DIR
from roboreel.formats.transient import Retry
from roboreel.validate._io import ReadFailed, Root
from roboreel.validate.compiled import check_compiled
from roboreel.validate.media import CountMode
from roboreel.validate.report import CODES, EXIT_CLEAN, EXIT_UNREADABLE, EXIT_VIOLATIONS, Finding, Report
from roboreel.validate.source import check_source
from roboreel.validate.summary import summarize

__all__ = [
    "CODES",
    "EXIT_CLEAN",
    "EXIT_UNREADABLE",
    "EXIT_VIOLATIONS",
    "Finding",
    "Report",
    "detect_kind",
    "summarize",
    "validate",
]


def detect_kind(root: Root, report: Report) -> str | None:
    """"compiled" (roboreel.json), "source" (meta/info.json), or None after a fatal finding saying why not.

    The files are looked for first, the root after: a plain HTTP server (no directory listings) has no root
    directory to find, yet serves a dataset that compile and the reader read, and an unfinished compile there
    is known by its compile record, not by its shards/ directory."""
    if root.exists(MANIFEST_NAME):
        return "compiled"
    if root.exists(COMPILE_RECORD_NAME):  # before meta/info.json: finalize writes meta/ before roboreel.json
        report.fatal("manifest-missing", "compile record but no roboreel.json: compile has not finished",
                     file=MANIFEST_NAME)
        return None
    if root.exists(INFO_PATH):
        return "source"
    if not root.exists():
        report.fatal("path-missing", "path does not exist", file=root.url)
        return None
    if root.isdir(SHARD_DIR):
        report.fatal("manifest-missing", "shards/ but no roboreel.json: compile has not finished", file=MANIFEST_NAME)
    else:
        report.fatal("not-a-dataset", f"neither {INFO_PATH} nor {MANIFEST_NAME} found", file=root.url)
    return None


def validate(path: str, *, world_size: int = 1, num_workers: int = 1, fast: bool = False, deep: bool = False,
             strict: bool = False, progress: bool = False,
             storage_options: dict[str, Any] | None = None, retry: Retry | None = None) -> Report:
    """Check any v3 dataset or compiled output at ``path`` (local or fsspec URL).

    Args:
        world_size, num_workers: the training layout the shard count should divide evenly over (a warning).
        fast: skip sha256 hashing (shards, members, rows) and count source mp4 frames from container headers
            instead of demuxing every packet.
        deep: decode every frame of every video and clip (slow; catches corrupt bitstreams).
        strict: warnings fail too (exit code 1).
        progress: tqdm bars on stderr.
        retry: how a remote read's transient faults are retried, as compile's (default ``Retry()``); a file that keeps
            failing is a fatal ``file-unreadable`` finding naming it.
    """
    if world_size < 1 or num_workers < 1:
        raise ValueError(f"world_size and num_workers must be >= 1, got {world_size} and {num_workers}")
    if fast and deep:
        raise ValueError("fast and deep are mutually exclusive (fast skips reading bytes that deep decodes)")
    report = Report(path=str(path), strict=strict)
    root = Root.open_url(str(path), storage_options=storage_options, retry=retry or Retry())
    try:
        kind = detect_kind(root, report)
        if kind is None:
            return report
        report.kind = kind  # type: ignore[assignment]
        count: CountMode = "decode" if deep else "packets"
        if kind == "compiled":
            check_compiled(root, report, world_size=world_size, num_workers=num_workers, fast=fast, count=count,
                           progress=progress)
        else:
            check_source(root, report, count="header" if fast else count, progress=progress)
    except ReadFailed as e:  # a remote file kept failing with transient faults: unreadable, not missing or bad
        report.fatal("file-unreadable", str(e).removesuffix(f" (file {e.file})"), file=e.file)
    return report
