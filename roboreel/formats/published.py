"""What a reader says when a file of the compiled version it opened is gone: the dataset was updated.

A compile into an OUT that holds an earlier compile (compile/out/_update.py) publishes the new ``roboreel.json`` by
one rename, then removes the shard tars and index files only the older version used. A reader that opened the
older version keeps reading it until it meets one of those files; then, instead of a bare "file not found",
it says that the dataset was updated after it was opened and that reopening it reads the new version.
"""

from __future__ import annotations

import json
from typing import Any

import fsspec

MANIFEST_NAME = "roboreel.json"  # formats/manifest.py's (importing it here would make a module cycle via index.py)


def replaced(url: str, storage_options: dict[str, Any] | None, descriptor: dict[str, Any] | None) -> str | None:
    """When the manifest published at ``url`` now is not the one whose index ``descriptor`` the reader holds:
    a sentence saying so (generations from its ``source.generation``), else None (the file is missing for
    another reason, reported as before)."""
    try:
        fs, root = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
        with fs.open(root.rstrip("/") + "/" + MANIFEST_NAME, "rb") as f:
            now = json.loads(f.read())
    except Exception:  # noqa: BLE001 - only a better message is at stake; the caller raises its own error
        return None
    if not isinstance(now, dict) or descriptor is None or now.get("index") == descriptor:
        return None
    new = (now.get("source") or {}).get("generation", 1) if isinstance(now.get("source"), dict) else "?"
    return (f"the dataset at {url} was updated by a new compile (now generation {new}) after this reader opened "
            "it, and the files of the version it opened were removed: reopen the dataset to read the new version")
