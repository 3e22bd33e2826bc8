"""roboreel inspect: the summary's numbers are the dataset's, for sources and compiled output alike."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from handmade import GOP, hand_compile

from roboreel.cli import main
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import load_manifest


def inspect_json(capsys, path: Path) -> dict:
    capsys.readouterr()
    assert main(["inspect", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_source(small_source, capsys):
    src = LeRobotSource(str(small_source))
    s = inspect_json(capsys, small_source)
    lengths = [e.length for e in src.episodes]
    assert (s["kind"], s["episodes"], s["frames"], s["fps"], s["tasks"]) == ("source", 8, sum(lengths), 20, 3)
    assert s["episode_length"]["min"] == min(lengths) and s["episode_length"]["max"] == max(lengths)
    assert [c["key"] for c in s["cameras"]] == src.camera_keys
    for c in s["cameras"]:
        mp4s = list((small_source / "videos" / c["key"]).glob("**/*.mp4"))
        assert (c["codec"], c["gop"], c["height"], c["width"]) == ("av1", 2, 64, 64)
        assert (c["files"], c["bytes"]) == (len(mp4s), sum(p.stat().st_size for p in mp4s))
    data = list(small_source.glob("data/**/*.parquet"))
    assert s["data"] == {"files": len(data), "bytes": sum(p.stat().st_size for p in data), "row_groups": 8,
                         "one_row_group_per_episode": True}
    assert main(["inspect", str(small_source)]) == 0
    text = capsys.readouterr().out
    assert f"frames    {sum(lengths)} at 20 fps" in text and "av1 64x64 yuv420p, GOP 2" in text


def test_inspect_flags_multi_episode_row_groups(source_factory, capsys):
    root = source_factory(row_groups="file", episodes=4)
    files = list(root.glob("data/**/*.parquet"))
    s = inspect_json(capsys, root)
    assert s["data"]["row_groups"] == sum(pq.ParquetFile(p).metadata.num_row_groups for p in files) < 4
    assert s["data"]["one_row_group_per_episode"] is False
    main(["inspect", str(root)])
    assert "NOT one per episode" in capsys.readouterr().out


def test_inspect_compiled(small_source, tmp_path, capsys):
    out = tmp_path / "compiled"
    m = hand_compile(small_source, out, per_shard=3)
    s = inspect_json(capsys, out)
    assert (s["kind"], s["format_version"], s["episodes"], s["frames"]) == ("compiled", 2, 8, m.total_frames)
    tars = sorted(out.glob("shards/*.tar"))
    sizes = [p.stat().st_size for p in tars]
    assert s["shards"] == {"count": 3, "bytes": sum(sizes), "min_bytes": min(sizes), "max_bytes": max(sizes),
                           "episodes_min": 2, "episodes_max": 3}
    for c in s["cameras"]:
        assert (c["codec"], c["gop"], c["bframes"]) == ("hevc", GOP, 0)
        assert c["bytes"] == sum(x.size for e in m.episodes for x in e.members if x.name.endswith(f"{c['key']}.mp4"))
    assert s["data"]["one_row_group_per_episode"] is True
    main(["inspect", str(out)])
    text = capsys.readouterr().out
    assert "shards    3," in text and "hevc 64x64 yuv420p, GOP 10, no B-frames" in text


def test_inspect_real_compile(small_compiled, capsys):
    compiled = small_compiled
    m = load_manifest(str(compiled))
    s = inspect_json(capsys, compiled)
    assert (s["episodes"], s["frames"], s["shards"]["count"]) == (len(m.episodes), m.total_frames, len(m.shards))


def test_inspect_unreadable_exits_2(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["inspect", str(tmp_path / "empty")]) == 2
    assert "not a dataset" in capsys.readouterr().err


def test_inspect_a_mixture(small_compiled, tmp_path_factory, capsys):
    """``roboreel inspect a,b --weights``: both members, then the mixture's draws, features and tasks; datasets
    that cannot be mixed exit 2 with the error naming both."""
    from support.datasets import compiled_pair

    _, other = compiled_pair(tmp_path_factory, episodes_per_shard=2, episodes=3, seed=5)
    mix = f"{small_compiled},{other}"
    assert main(["inspect", mix, "--weights", "3,1", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    frames = [m["frames"] for m in s["members"]]
    assert s["mixture"]["samples_per_epoch"] == sum(frames)
    n0 = round(sum(frames) * 3 / 4)  # largest remainder: the rounded share
    assert s["mixture"]["member_samples"] == [n0, sum(frames) - n0]
    assert "observation.images.top" in s["mixture"]["features"] and s["mixture"]["left_out"] == {}
    assert main(["inspect", mix]) == 0
    assert f"{sum(frames)} (" in capsys.readouterr().out
    _, big = compiled_pair(tmp_path_factory, episodes_per_shard=2, episodes=2, height=72)
    assert main(["inspect", f"{small_compiled},{big}"]) == 2
    err = capsys.readouterr().err
    assert str(small_compiled) in err and str(big) in err and "--resize" in err
