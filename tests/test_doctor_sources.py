"""``roboreel doctor PATH`` on the kinds of data users have: H.264 and depth sources and their compiles (an H.264
stream copy stays H.264, depth clips are HEVC), image features (nothing to decode in the source, clips once
compiled), and a source and a compiled dataset over HTTP, which report what their local copies do."""

from __future__ import annotations

import json

import pytest
from support.httpserver import FaultyServer
from support.settings import FAST

from roboreel.cli import main
from roboreel.compile import compile_dataset
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import load_manifest

KINDS = {
    "h264": ({"codec": "libx264"}, ("h264", "h264")),
    "depth": ({"cameras": ("observation.images.top",), "depth_cameras": ("observation.images.depth",)},
              ("av1", "hevc")),
    "images": ({"use_videos": False}, (None, "hevc")),
}


def _doctor(capsys, path: str) -> tuple[int, dict]:
    rc = main(["doctor", path, "--json"])
    return rc, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """kind -> (source, compiled), 3 episodes each."""
    from conftest import make_source

    out = {}
    for kind, (overrides, _) in KINDS.items():
        root = tmp_path_factory.mktemp(kind)
        src = make_source(root / "src", episodes=3, **overrides)
        compile_dataset(str(src), str(root / "compiled"), settings=FAST, workers=1)
        out[kind] = (src, root / "compiled")
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_doctor_reports_every_camera_of_a_source_and_its_compile(capsys, datasets, kind):
    src, compiled = datasets[kind]
    source_codec, compiled_codec = KINDS[kind][1]
    rc, d = _doctor(capsys, str(src))
    assert rc == 0 and d["dataset"]["kind"] == "source"
    cams = LeRobotSource(str(src)).camera_keys if source_codec else []
    assert [c["key"] for c in d["dataset"]["cameras"]] == cams
    for cam in d["dataset"]["cameras"]:
        assert cam["cpu"]["ok"] and cam["codec"] in (source_codec, "hevc")  # depth: HEVC as LeRobot writes it
    if not cams:
        assert d["verdict"]["lines"] == ["VERDICT: dataset has no video features: nothing to decode"]

    rc, d = _doctor(capsys, str(compiled))
    m = load_manifest(str(compiled))
    first = m.episode(m.shards[0].episodes[0])
    assert rc == 0 and d["dataset"]["kind"] == "compiled"
    assert [c["key"] for c in d["dataset"]["cameras"]] == m.camera_keys
    for cam in d["dataset"]["cameras"]:
        want = "hevc" if "depth" in cam["key"] else compiled_codec
        assert (cam["codec"], cam["cpu"]["ok"], cam["cpu"]["num_frames"]) == (want, True, first.length), cam
    assert d["verdict"]["lines"][0].startswith("VERDICT: dataset decodable on cpu")


@pytest.mark.parametrize(("kind", "which"), [("depth", 1), ("h264", 0)])
def test_doctor_over_http_reports_what_the_local_copy_does(capsys, datasets, kind, which):
    """A plain static server (no directory listings), as the reader and validate read one."""
    path = datasets[kind][which]
    _, local = _doctor(capsys, str(path))
    with FaultyServer(path) as server:
        rc, remote = _doctor(capsys, server.url)
    assert rc == 0
    assert remote["dataset"]["cameras"] == local["dataset"]["cameras"]
    assert remote["verdict"] == local["verdict"]
