"""Whole-directory comparisons and the invariants a compile OUT must keep at every instant."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from roboreel.formats.manifest import MANIFEST_NAME, load_manifest

# Files that identify the source (its path and fingerprint): equal across compiles of one source only.
_NAMES_SOURCE = (MANIFEST_NAME, ".roboreel-compile.json")


def tree(root: Path, *, ignore_source: bool = False) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes). With ``ignore_source`` the ``source`` entry (path and
    fingerprint) is dropped from the files that record it, and the episode fingerprints from the sidecars, so compiles of two sources that must give the same
    output (e.g. the same rows in another row-group layout) compare equal."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            rel = str(p.relative_to(root))
            data = p.read_bytes()
            if ignore_source and rel in _NAMES_SOURCE:
                doc = json.loads(data)
                doc.pop("source")
                data = json.dumps(doc).encode()
            elif ignore_source and rel.startswith(".roboreel-parts/shard-"):  # fingerprints hash the source files
                doc = json.loads(data)
                doc.pop("fingerprints", None)
                data = json.dumps(doc).encode()
            out[rel] = data
    return out


def assert_same_tree(got: Path, want: Path, *, ignore_source: bool = False) -> None:
    """Byte-identical directories (names and contents), listing every difference on failure."""
    a, b = tree(got, ignore_source=ignore_source), tree(want, ignore_source=ignore_source)
    assert sorted(a) == sorted(b), {"only in got": sorted(a.keys() - b.keys()),
                                    "only in want": sorted(b.keys() - a.keys())}
    differing = [k for k in a if a[k] != b[k]]
    assert differing == [], differing


def temp_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


def trusted_files_are_whole(out: Path) -> list[str]:
    """What a later step would trust in a (possibly killed) compile OUT, and is not whole. Empty is good.

    - a shard sidecar makes resume skip its shard: the tar and data files it names must exist with its sizes
      and sha256;
    - ``roboreel.json`` makes validate and the reader trust the dataset: every shard it lists must exist with
      its size and sha256.
    """
    bad = []
    for side_path in sorted((out / ".roboreel-parts").glob("shard-*.json")):
        side = json.loads(side_path.read_text())  # written atomically: a sidecar is never half-written
        for key in ("tar", "data"):
            f = out / side[key]["path"]
            if not f.is_file() or f.stat().st_size != side[key]["size"] or _sha(f) != side[key]["sha256"]:
                bad.append(f"{side_path.name} -> {side[key]['path']}")
    if (out / MANIFEST_NAME).exists():  # its shards and index files (format 2: the shards are in the index)
        m = load_manifest(str(out))
        refs = [(s.path, s.size, s.sha256) for s in m.shards]
        if m.index_files is not None:
            refs += [(r["path"], r["size"], r["sha256"]) for r in (m.index_files["shards"], *m.index_files["episodes"])]
        for rel, size, sha in refs:
            f = out / rel
            if not f.is_file() or f.stat().st_size != size or _sha(f) != sha:
                bad.append(f"{MANIFEST_NAME} -> {rel}")
    return bad


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
