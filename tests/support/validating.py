"""What the validate tests share: the CLI's JSON report, its errors, a copy to damage, a clip made shorter."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import av

from roboreel.cli import main


def run_json(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["validate", *args, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def errors(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["severity"] == "error"]


def copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def drop_last_frames(path: Path, n: int) -> None:
    """Remux ``path`` without its last ``n`` packets: a valid mp4 with fewer frames."""
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(path)) as i, av.open(str(tmp), "w", format="mp4") as o:
        ist = i.streams.video[0]
        ost = o.add_stream_from_template(ist, opaque=True)
        packets = [p for p in i.demux(ist) if p.size]
        for p in packets[:-n]:
            p.stream = ost
            o.mux(p)
    tmp.replace(path)
