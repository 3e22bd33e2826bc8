"""Compiled output read back with the standard library and torchcodec: records, trees of files, clip codes."""

from __future__ import annotations

import tarfile
from pathlib import Path

from torchcodec.decoders import VideoDecoder

from roboreel.formats.shard import EpisodeRecord
from roboreel.synth import FrameCode, read


def read_records(out: Path) -> dict[int, EpisodeRecord]:
    """Every episode record of a compiled dataset, read from the tars with the standard library."""
    records = {}
    for tar in sorted((out / "shards").glob("*.tar")):
        groups: dict[str, dict[str, bytes]] = {}
        with tarfile.open(tar) as t:
            for m in t.getmembers():
                groups.setdefault(m.name.split(".", 1)[0], {})[m.name] = t.extractfile(m).read()
        for members in groups.values():
            rec = EpisodeRecord.from_members(members, shard=str(tar))
            records[rec.index] = rec
    return records


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path -> bytes)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_same_tree(a: Path, b: Path) -> None:
    ta, tb = tree(a), tree(b)
    assert sorted(ta) == sorted(tb)
    differing = [k for k in ta if ta[k] != tb[k]]
    assert differing == []


def clip_codes(data: bytes) -> list[FrameCode]:
    dec = VideoDecoder(data)
    return [read(dec[i]) for i in range(len(dec))]
