"""The soak benchmark's records: every epoch's samples and RSS per process, growth after warm-up, a CSV twin."""

from __future__ import annotations

import csv
import json
import subprocess

from test_reader_decoder_cache import _epochs

from roboreel.bench.soak import SoakConfig, growth_after_warmup, soak
from roboreel.reader import CompiledDataset, DecodeOptions
from roboreel.reader.decode._decoder_cache import process_cache


def _lanes(compiled, epochs: int) -> list[int]:
    """Decoders a reader without the cache opens in each epoch: one per clip and lane that epoch's plan names."""
    return _epochs(CompiledDataset(str(compiled), decode=DecodeOptions(idle_decoders_mb=0)), epochs)[1]


def test_soak_records_every_epoch_and_writes_json_and_csv(small_compiled, tmp_path):
    # a child process that was there before the soak (another test's, in one pytest run) is not the soak's worker
    other = subprocess.Popen(["sleep", "60"])
    try:
        doc = soak(str(small_compiled), SoakConfig(epochs=3, warmup_epochs=1, batch_size=4, num_workers=0), tmp_path,
                   progress=False)
    finally:
        other.kill()
        other.wait()
    total = len(CompiledDataset(str(small_compiled)))
    assert [r["samples"] for r in doc["epochs"]] == [total] * 3
    assert set(doc["growth"]) == {"main"}
    assert {"torch", "torchcodec"} <= set(doc["environment"])
    assert json.loads((tmp_path / "soak.json").read_text())["growth"] == doc["growth"]
    lines = list(csv.reader((tmp_path / "soak.csv").open()))
    assert lines[0] == ["epoch", "samples", "seconds", "decoder_opens", "rss_main_mb"]
    assert [(int(r[0]), int(r[1])) for r in lines[1:]] == [(0, total), (1, total), (2, total)]
    assert [float(r[4]) for r in lines[1:]] == [round(r["rss"]["main"] / 2**20, 2) for r in doc["epochs"]]
    lanes = _lanes(small_compiled, 3)
    # the default (automatic): every clip's lanes opened in epochs 0 and 1, parked in epoch 1, taken back in epoch 2
    assert [int(r[3]) for r in lines[1:]] == [lanes[0], lanes[1], 0]


def test_soak_with_kept_decoders_opens_none_after_the_first_epoch(small_compiled, tmp_path):
    try:
        doc = soak(str(small_compiled), SoakConfig(epochs=3, warmup_epochs=1, batch_size=4, num_workers=0,
                                                   idle_decoders_mb=64), tmp_path, progress=False)
    finally:
        process_cache(1).resize(0)  # this process read the epochs: empty its cache for the other tests
    assert [r["decoder_opens"] for r in doc["epochs"]] == [_lanes(small_compiled, 1)[0], 0, 0]
    assert doc["config"]["idle_decoders_mb"] == 64


def test_growth_is_measured_from_the_end_of_warm_up():
    mb = 2**20
    rows = [{"rss": {"main": m * mb, "worker0": w * mb}} for m, w in [(50, 90), (100, 200), (100, 202), (100, 204),
                                                                       (101, 206)]]
    g = growth_after_warmup(rows, warmup=1)
    assert g["worker0"]["after_warmup_mb"] == 200 and g["worker0"]["end_mb"] == 206
    assert g["worker0"]["growth_pct"] == 3.0
    assert g["worker0"]["slope_mb_per_epoch"] == 2.0 and g["worker0"]["max_mb"] == 206
    assert g["main"]["growth_pct"] == 1.0
    assert growth_after_warmup(rows[:2], warmup=1) == {}
