"""`roboreel bench read` / `bench compile` run end to end on a tiny dataset and writes its reports; it refuses to report nothing.

No timing is asserted here: performance lives in docs/benchmarks.md, measured with the commands given there.
"""

from __future__ import annotations

import csv
import json

import pytest

from roboreel.bench.config import RunConfig
from roboreel.bench.runner import BenchError, run_one
from roboreel.cli import main


@pytest.mark.slow  # a sweep: 2 places x 2 modes x 2 repeats x 2 readers (~35 s on 2 cores); CI runs it (-m slow)
def test_bench_writes_reports_local_and_remote(small_source, small_compiled, tmp_path):
    out = tmp_path / "bench"
    rc = main(["bench", "read", str(small_compiled), "--source", str(small_source), "--readers", "compiled,reference,lerobot",
               "--modes", "single,sarm", "--batch-size", "4", "--num-workers", "0", "--warmup-batches", "1",
               "--batches", "2", "--repeats", "2", "--remote-latency-ms", "2", "--ceiling-seconds", "0.1",
               "--out", str(out)])
    assert rc == 0
    runs = json.loads((out / "runs.json").read_text())
    # 2 places x 2 modes x 2 repeats x 2 readers (lerobot is skipped with a message: not installed here)
    assert len(runs) == 16
    assert {(r["where"], r["mode"], r["reader"]) for r in runs} == {
        (w, m, r) for w in ("local", "http+2ms") for m in ("single", "sarm") for r in ("compiled", "reference")
    }
    order = [r["reader"] for r in runs[:4]]
    assert order == ["compiled", "reference", "compiled", "reference"]  # A B A B
    for r in runs:
        assert r["samples"] > 0 and r["samples_per_s"] > 0 and r["first_batch_s"] > 0
        assert r["peak_rss_mb"] > 0 and r["distinct_episodes_per_batch"] >= 1
        assert r["latency_p50_ms"] <= r["latency_p99_ms"]
        assert r["frame_dtype"] == "torch.float32"  # LeRobot's default
        assert r["ceiling_fraction"] > 0
    compiled = [r for r in runs if r["reader"] == "compiled"]
    assert all(r["decoder_opens"] > 0 and r["decode_s"] > 0 for r in compiled)
    with open(out / "runs.csv") as f:
        assert len(list(csv.DictReader(f))) == 16
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ceiling_frames_per_s"] > 0 and summary["transport_samples_per_s"] > 0
    # every local run is set against the ceiling measured just before and just after it: 2 modes x 2 rounds x
    # (2 readers + 1) measurements, a run's "after" being the next run's "before" within a round
    measured = summary["ceiling_frames_per_s_measured"]
    assert len(measured) == 12 and all(c > 0 for c in measured)
    local = [r for r in runs if r["where"] == "local"]
    assert [(r["ceiling_before_frames_per_s"], r["ceiling_after_frames_per_s"]) for r in local] == [
        (measured[k + i], measured[k + i + 1]) for k in (0, 3, 6, 9) for i in (0, 1)]
    for r in local:
        mean = (r["ceiling_before_frames_per_s"] + r["ceiling_after_frames_per_s"]) / 2
        assert r["ceiling_frames_per_s"] == pytest.approx(mean)
        assert r["ceiling_fraction"] == pytest.approx(r["samples_per_s"] * r["cameras"] / mean)
        assert r["ceiling_drift"] == pytest.approx(r["ceiling_after_frames_per_s"] / r["ceiling_before_frames_per_s"] - 1)
    remote = [r for r in runs if r["where"] != "local"]
    assert all(r["ceiling_frames_per_s"] > 0 and r["ceiling_drift"] == pytest.approx(0.0) for r in remote)
    ref = [s for s in summary["summary"] if s["reader"] == "reference"]
    assert all(s["x_reference"] == pytest.approx(1.0) for s in ref)
    assert (out / "summary.md").read_text().startswith("| where | mode | reader |")
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_uint8_runs_every_reader_in_uint8(small_source, small_compiled, tmp_path):
    cfg = RunConfig(batch_size=4, num_workers=0, warmup_batches=1, batches=2, return_uint8=True)
    for reader in ("compiled", "reference"):
        res = run_one(reader, "single", compiled=str(small_compiled), source=str(small_source), cfg=cfg)
        assert res["frame_dtype"] == "torch.uint8" and res["samples"] == 8


def test_bench_reports_sample_order_beside_uniform_sampling(small_source, small_compiled):
    """Every reader's run carries its batches' order figures and uniform sampling's over what it reads."""
    from roboreel.formats.lerobot_v3 import LeRobotSource
    from roboreel.reader.order import uniform_order

    cfg = RunConfig(batch_size=4, num_workers=0, warmup_batches=1, batches=3, return_uint8=True)
    src = LeRobotSource(str(small_source))
    want = uniform_order([e.length for e in src.episodes], fps=src.fps, batch_size=4)
    for reader in ("compiled", "reference"):
        res = run_one(reader, "single", compiled=str(small_compiled), source=str(small_source), cfg=cfg)
        assert res["batches"] == 3  # the window, not the order meter's count
        assert 1 <= res["distinct_episodes_per_batch"] <= 4 and res["near_duplicate_pairs_per_batch"] >= 0
        assert (res["uniform_distinct_episodes_per_batch"], res["uniform_near_duplicate_pairs_per_batch"]) == (
            pytest.approx(want[0]), pytest.approx(want[1]))


def test_bench_loader_orders_hold_what_their_names_say(small_source, small_compiled):
    """loader_segments is the README's loader at frame_order="segments" (GOP runs: neighbours in a batch);
    loader_random and the README's default order hold fewer near-duplicates."""
    cfg = RunConfig(batch_size=8, num_workers=0, warmup_batches=1, batches=6, return_uint8=True)
    pairs = {r: run_one(r, "single", compiled=str(small_compiled), source=str(small_source), cfg=cfg)[
        "near_duplicate_pairs_per_batch"] for r in ("loader_readme", "loader_random", "loader_segments")}
    assert pairs["loader_random"] < pairs["loader_segments"] and pairs["loader_readme"] < pairs["loader_segments"]


def test_bench_warmup_epochs_measures_the_next_epoch(small_source, small_compiled):
    # A whole epoch is read first, untimed; the window's counters are the measured epoch's alone.
    cfg = RunConfig(batch_size=4, num_workers=0, warmup_batches=1, batches=3, return_uint8=True, warmup_epochs=1)
    from roboreel.reader import CompiledDataset

    frames = len(CompiledDataset(str(small_compiled)))
    for reader in ("compiled", "loader"):
        res = run_one(reader, "single", compiled=str(small_compiled), source=str(small_source), cfg=cfg)
        assert res["warmup_samples"] == frames and res["samples"] == 12 and res["first_batch_s"] > 0
        assert res["reader_stats"]["samples"] < frames  # the warm-up epoch is not in the window's counters
    # Persistent DataLoader workers (the bench's default, as lerobot-train) carry the warm-up into the window.
    for reader in ("compiled", "loader"):
        res = run_one(reader, "single", compiled=str(small_compiled), source=str(small_source),
                      cfg=RunConfig(batch_size=4, num_workers=1, warmup_batches=1, batches=3, return_uint8=True,
                                    warmup_epochs=1))
        assert res["warmup_samples"] == frames and res["samples"] == 12 and res["persistent_workers"]
    cold = run_one("compiled", "single", compiled=str(small_compiled), source=str(small_source),
                   cfg=RunConfig(batch_size=4, num_workers=0, warmup_batches=1, batches=3, return_uint8=True))
    assert cold["warmup_samples"] == 0


def test_bench_fails_loudly_on_zero_samples(small_source, small_compiled):
    # 8 tiny episodes give a few hundred samples: 10,000 warm-up batches of 64 leave nothing to measure.
    cfg = RunConfig(batch_size=64, num_workers=0, warmup_batches=10_000, batches=5)
    with pytest.raises(BenchError, match="no samples in the steady window"):
        run_one("compiled", "single", compiled=str(small_compiled), source=str(small_source), cfg=cfg)


def test_compile_bench_compares_with_ffmpeg(small_source, tmp_path):
    out = tmp_path / "cb"
    rc = main(["bench", "compile", "--source", str(small_source), "--workers", "1", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "compile.json").read_text())
    tools = {r["tool"] for r in data["runs"]}
    assert tools == {"roboreel", "ffmpeg"}
    frames = {r["frames"] for r in data["runs"]}
    assert len(frames) == 1  # both transcoded exactly the same frames
    assert data["ratios"][0]["workers"] == 1 and data["ratios"][0]["ratio"] > 0


def test_bench_window_runs_on_across_epochs_on_a_set_smaller_than_it(small_source, small_compiled):
    """By default the steady window goes on into the next epochs (set_epoch each), as training does; with
    ``span_epochs=False`` it ends with its epoch. The README's own call (``loader_readme``), its old default
    (``loader_refork``) and the loader without worker processes (``loader_inproc``) are readers of their own."""
    from roboreel.reader import CompiledDataset

    frames = len(CompiledDataset(str(small_compiled)))
    batches = frames // 4 + 6  # more than one epoch holds
    for reader in ("loader_readme", "loader_refork", "loader_inproc", "compiled"):
        cfg = RunConfig(batch_size=4, num_workers=1, warmup_batches=1, batches=batches, return_uint8=True)
        res = run_one(reader, "single", compiled=str(small_compiled), source=str(small_source), cfg=cfg)
        assert res["steady_epochs"] >= 2 and res["samples"] > frames, reader
        assert res["epoch_start_s"] > 0 and res["frame_dtype"] == "torch.uint8"
    one = run_one("loader_readme", "single", compiled=str(small_compiled), source=str(small_source),
                  cfg=RunConfig(batch_size=4, num_workers=1, warmup_batches=1, batches=batches, return_uint8=True,
                                span_epochs=False))
    assert one["steady_epochs"] == 1 and one["samples"] < frames


def test_bench_chart_and_summary_name_the_data(small_source, small_compiled, tmp_path):
    from roboreel.bench.suite import data_label
    from roboreel.formats.manifest import load_manifest

    out = tmp_path / "bench"
    assert main(["bench", "read", str(small_compiled), "--source", str(small_source), "--readers", "loader", "--modes",
                 "single", "--batch-size", "4", "--num-workers", "1", "--warmup-batches", "1", "--batches", "2",
                 "--return-uint8", "--no-ceiling", "--no-isolate", "--out", str(out)]) == 0
    cam = load_manifest(str(small_compiled)).cameras[0]
    label = json.loads((out / "summary.json").read_text())["data"]
    assert label == data_label(str(small_compiled), RunConfig(batch_size=4, num_workers=1, return_uint8=True))
    assert f"{cam.height}x{cam.width}" in label and "uint8, batch 4, 1 worker (persistent)" in label
    assert label in (out / "summary.md").read_text()
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_compares_a_mixture_with_its_largest_member(small_source, small_compiled, tmp_path_factory,
                                                          tmp_path):
    """``roboreel bench a,b --weights ... --readers loader,largest_loader``: the mixture, then its largest member
    alone, alternated; readers of one source refuse a mixture."""
    from support.datasets import compiled_pair

    _, other = compiled_pair(tmp_path_factory, episodes_per_shard=2, episodes=3, seed=5)
    mix = f"{small_compiled},{other}"
    out = tmp_path / "bench"
    rc = main(["bench", "read", mix, "--weights", "0.6,0.4", "--readers", "loader,largest_loader", "--modes", "single",
               "--batch-size", "4", "--num-workers", "0", "--warmup-batches", "1", "--batches", "2", "--repeats", "2",
               "--no-ceiling", "--no-isolate", "--out", str(out)])
    assert rc == 0
    runs = json.loads((out / "runs.json").read_text())
    assert [r["reader"] for r in runs] == ["loader", "largest_loader"] * 2
    assert all(r["samples"] == 8 and r["samples_per_s"] > 0 for r in runs)
    from roboreel.bench.readers import build

    built = build("loader", "single", compiled=mix, source="", cfg=RunConfig(weights=(0.6, 0.4)), seed=0)
    assert built.compiled.urls == [str(small_compiled), str(other)] and built.compiled.member_samples()[1] > 0
    alone = build("largest_loader", "single", compiled=mix, source="", cfg=RunConfig(), seed=0).compiled
    assert alone.url == str(small_compiled) and alone.num_frames > built.compiled.members[1].num_frames
    cfg = RunConfig(batch_size=4, num_workers=0, warmup_batches=1, batches=2)
    with pytest.raises(ValueError, match="largest member"):
        run_one("reference", "single", compiled=mix, source=str(small_source), cfg=cfg)


def test_bench_reads_a_mixture_of_robots_through_its_remap_file(tmp_path_factory, tmp_path):
    """``roboreel bench read a,b --remap FILE --pad max``: members with other cameras, sizes and fps are read as
    one canonical stream (without the file such a mixture would keep only common keys), its largest member alone."""
    from support.datasets import compiled_pair

    _, a = compiled_pair(tmp_path_factory, episodes_per_shard=2)
    _, b = compiled_pair(tmp_path_factory, episodes_per_shard=1, episodes=3, fps=10, state_dim=4, action_dim=3,
                         cameras=("observation.images.front",), seed=5)
    remap = tmp_path / "remap.json"
    remap.write_text(json.dumps([{}, {"observation.images.front": "observation.images.top"}]))
    mix, out = f"{a},{b}", tmp_path / "bench"
    rc = main(["bench", "read", mix, "--remap", str(remap), "--pad", "max", "--weights", "0.5,0.5", "--readers",
               "loader,largest_loader", "--modes", "single", "--batch-size", "4", "--num-workers", "0",
               "--warmup-batches", "1", "--batches", "2", "--repeats", "1", "--no-ceiling", "--no-isolate",
               "--out", str(out)])
    assert rc == 0
    runs = json.loads((out / "runs.json").read_text())
    assert [(r["reader"], r["samples"]) for r in runs] == [("loader", 8), ("largest_loader", 8)]
    assert runs[0]["remap_file"] == str(remap) and runs[0]["pad"] == "max"
    from roboreel.bench.readers import build

    ds = build("loader", "single", compiled=mix, source="",
               cfg=RunConfig(weights=(0.5, 0.5), remap_file=str(remap), pad="max"), seed=0).compiled
    sample = next(iter(ds))
    assert sample["observation.state"].shape == (6,) and "observation.state_dim_is_pad" in sample
    assert "observation.images.wrist_is_missing" in sample and "observation.images.front" not in sample


def test_stage_premade_script_feeds_the_stage_both_ways(small_compiled):
    """benchmarks/stage_premade.py drives the decode stage's internals (pool, decoders, budgets): it runs, both ways,
    and counts the dataset's samples every epoch."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from roboreel.reader import CompiledDataset

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "stage_premade.py"
    for keep in ("0", "8"):  # episodes read every epoch, or kept across them
        out = subprocess.run([sys.executable, str(script), str(small_compiled), "--epochs", "2", "--rounds", "1",
                              "--batch-size", "4", "--keep-episodes-mb", keep],
                             capture_output=True, text=True, timeout=300, check=True).stdout
        runs = dict(re.findall(r"^(live|premade)\s+\d+ samples/s.*first batch [\d.]+ ms\s+\((\d+) samples\)$", out,
                               flags=re.M))
        assert runs == {"live": str(2 * len(CompiledDataset(str(small_compiled)))), "premade": runs.get("live")}, out
    made = subprocess.run([sys.executable, str(script), str(small_compiled), "--make-only", "--epochs", "2",
                           "--rounds", "1", "--batch-size", "4", "--action-window", "3"],
                          capture_output=True, text=True, timeout=300, check=True).stdout
    assert re.findall(r"^make\s+[\d.]+ CPU ms/sample\s+\((\d+) samples\)$", made, flags=re.M) == [runs["live"]], made


def test_decode_ceiling_passes_decode_the_clips_as_many_times_as_asked(small_compiled):
    # a ceiling pass lasts at least CEILING_SECONDS by decoding the clips several times over: every time in full
    from roboreel.bench.ceiling import CeilingMeter, _decode_all, compiled_clips

    clips = compiled_clips(small_compiled)
    once = _decode_all(clips)
    assert once > 0 and _decode_all(clips, 3) == 3 * once
    with CeilingMeter(clips, processes=1) as meter:
        assert meter.measure(min_seconds=0.2) > 0


def test_variants_table_has_each_readers_order_beside_uniform():
    """``roboreel bench resize``/``images`` tables: each reader's medians of episodes and near-duplicate pairs per
    batch over its rounds, uniform sampling's in brackets."""
    from roboreel.bench.variants_bench import _order, markdown

    def run(variant, sps, d, p):
        return {"variant": variant, "samples_per_s": sps, "distinct_episodes_per_batch": d,
                "uniform_distinct_episodes_per_batch": 7.9, "near_duplicate_pairs_per_batch": p,
                "uniform_near_duplicate_pairs_per_batch": 7.1}

    runs = [run("loader full", 100, 7.0, 1.0), run("loader full", 120, 8.0, 3.0), run("loader full", 110, 7.5, 2.0),
            run("lerobot", 50, 7.9, 7.0)]
    names = ["loader full", "lerobot"]
    result = {"compile": {}, "samples_per_s": {"loader full": 110, "lerobot": 50},
              "order": {v: _order([r for r in runs if r["variant"] == v]) for v in names}}
    table = markdown(result)
    assert "| loader full | 110 | 1.00 | 2.2 | 7.5 (7.9) | 2.0 (7.1) |" in table
    assert "| lerobot | 50 | 0.45 | 1.0 | 7.9 (7.9) | 7.0 (7.1) |" in table
