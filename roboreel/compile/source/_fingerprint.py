"""Per-clip and per-episode fingerprints: what decides, without decoding anything, that a compiled episode can be
reused when its source grows or changes (docs/incremental.md).

A clip is a pure function of its source span and the settings (jobs/_schedule.py), so its fingerprint hashes exactly
those inputs: the encoder settings and the x265 parameters they give, the camera, the content checksum and size
of the source file the clip is cut from (compile/source/_files.py: sha256 of a local file, the store's content hash
of a remote one) and the span in it (timestamps of a video, row range of an image feature). An episode's
fingerprint adds what its record carries besides clips: its index, length, global row range and tasks, and the
checksum of the data file its rows come from. A file edited anywhere therefore changes the fingerprints of every
episode it holds (they are recompiled, a safe over-approximation); a file left alone (LeRobot's ``resume()``
writes new files beside the old ones) keeps them. A source file with no content checksum (a remote store that
gives none) gets no fingerprint: never reused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from roboreel.compile.settings import CompileSettings
from roboreel.formats.lerobot_v3 import LeRobotSource

FINGERPRINT_VERSION = 2  # 2: the x265 parameters the settings give (x265_params) are hashed too


def _hash(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _file(files: dict[str, dict[str, Any]], rel: str) -> list[Any] | None:
    f = files.get(rel)
    if not f or not f.get("hash"):
        return None
    return [int(f["size"]), str(f["hash"])]


def episode_fingerprints(source: LeRobotSource, settings: CompileSettings, cams: list[str],
                         files: dict[str, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """``{episode: {"episode": fp | None, "clips": {camera: fp | None}}}`` for every source episode.

    Reads only meta/ (already loaded) and the record's file checksums: O(episodes), no decode, no data read."""
    # x265's parameters as this roboreel derives them from the settings (the size-dependent ones follow from the
    # source's size and the settings, both hashed): a roboreel whose parameters differ makes other clips from the
    # same settings, so an update by it recompiles every clip rather than mixing the two.
    common = {"v": FINGERPRINT_VERSION, "settings": settings.to_dict(), "x265": settings.x265_params(),
              "fps": source.fps}
    out: dict[int, dict[str, Any]] = {}
    for e in source.episodes:
        clips: dict[str, str | None] = {}
        for cam in cams:
            if cam in e.videos:
                span = e.videos[cam]
                f, where = _file(files, span.path), [round(span.from_timestamp, 6), round(span.to_timestamp, 6)]
            else:  # an image feature made a clip: its frames are rows of the data file
                f, where = _file(files, e.data_path), [e.from_index, e.to_index]
            clips[cam] = None if f is None else _hash({**common, "camera": cam, "file": f, "span": where,
                                                       "length": e.length})
        rows = _file(files, e.data_path)
        whole = None if rows is None or None in clips.values() else _hash({
            **common, "episode": e.index, "length": e.length, "rows": [e.from_index, e.to_index], "data": rows,
            "tasks": list(e.tasks), "clips": clips})
        out[e.index] = {"episode": whole, "clips": clips}
    return out
