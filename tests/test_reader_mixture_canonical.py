"""The canonical keys of a mixture as pure functions of the members' feature dicts and stats (reader/mixture/:
_canonical.py, _stats.py, _normalize.py): what is renamed, padded, missing or left out, what is refused and why,
and the stats pooled per element without padded values."""

from __future__ import annotations

import numpy as np
import pytest

from roboreel.formats.merge import MixtureMismatch, aggregate_stats
from roboreel.reader.mixture._canonical import canonical
from roboreel.reader.mixture._normalize import Normalizer
from roboreel.reader.mixture._stats import canonical_stats


def _vec(n):
    return {"dtype": "float32", "shape": [n], "names": [f"j{i}" for i in range(n)]}


def _cam(h=64):
    return {"dtype": "video", "shape": [h, 64, 3], "names": ["height", "width", "channels"]}


BASE = {"timestamp": {"dtype": "float32", "shape": [1]}, "index": {"dtype": "int64", "shape": [1]}}
A = {"cam.top": _cam(), "cam.wrist": _cam(), "state": _vec(6), "force": _vec(1), **BASE}
B = {"cam.front": _cam(), "state": _vec(4), **BASE}


def test_rename_pad_missing_and_left_out():
    c = canonical(["a", "b"], [A, B], [["cam.top", "cam.wrist"], ["cam.front"]], [None, {"cam.front": "cam.top"}],
                  "max")
    assert list(c.features) == ["cam.top", "cam.wrist", "state", "timestamp", "index"]
    assert c.cameras == ("cam.top", "cam.wrist") and c.missing_cameras == ("cam.wrist",)
    assert c.sizes == {"state": 6} and c.features["state"]["names"] == [f"j{i}" for i in range(6)]
    a, b = c.members
    assert a.pad == {} and b.pad == {"state": 4} and b.missing == ("cam.wrist",) and a.missing == ()
    assert b.rename["cam.front"] == "cam.top" and b.own["cam.top"] == "cam.front"
    assert c.dropped == {"a": ["force"]} and "force" not in a.tabular and not c.identity
    same = canonical(["a", "a2"], [A, A], [["cam.top", "cam.wrist"]] * 2)
    assert same.identity and same.sizes == {} and list(same.features) == list(A)


@pytest.mark.parametrize(("remap", "pad", "match"), [
    ([None, {"cam.side": "cam.top"}], "max", r"remap of b names \['cam.side'\], which it does not have"),
    ([None, {"cam.front": "cam.top", "state": "cam.top"}], "max", "maps 'cam.front' and 'state' to one key"),
    ([None, {"index": "idx"}], "max", "keep their names"),
    ([None, {"state": 3}], "max", "a new key is a non-empty string"),
    ([None], "max", "one dict"),
    ([None, {"cam.front": "cam.top"}], None, "pad='max' zero-pads"),
    ([None, {"cam.front": "cam.top"}], "min", "pad='min'"),
    ([None, {"cam.front": "cam.top", "state": "cam.wrist"}], "max", "stored as clips in one dataset"),
])
def test_refused_with_the_member_named(remap, pad, match):
    with pytest.raises(ValueError, match=match):
        canonical(["a", "b"], [A, B], [["cam.top", "cam.wrist"], ["cam.front"]], remap, pad)


def test_cameras_of_other_sizes_name_both_and_the_resize_fix():
    big = {**B, "cam.front": _cam(72)}
    with pytest.raises(MixtureMismatch, match="--resize") as e:
        canonical(["a", "b"], [A, big], [["cam.top", "cam.wrist"], ["cam.front"]], [None, {"cam.front": "cam.top"}],
                  "max")
    assert "[64, 64, 3] in a ('cam.top') but [72, 64, 3] in b ('cam.front')" in str(e.value)


def _stats(mean, std, lo, hi, count):
    return {"mean": np.array(mean), "std": np.array(std), "min": np.array(lo), "max": np.array(hi),
            "count": np.array([count])}


def test_stats_pool_each_dimension_over_the_members_that_have_it():
    c = canonical(["a", "b"], [A, B], [["cam.top", "cam.wrist"], ["cam.front"]], [None, {"cam.front": "cam.top"}],
                  "max")
    sa = {"state": _stats([1.0] * 6, [1.0] * 6, [0.0] * 6, [2.0] * 6, 30)}
    sb = {"state": _stats([3.0] * 4, [2.0] * 4, [-1.0] * 4, [9.0] * 4, 10)}
    st = canonical_stats(c, [sa, sb])["state"]
    pooled = aggregate_stats(["a", "b"], [{"s": {k: v[:4] if k != "count" else v for k, v in sa["state"].items()}},
                                          {"s": sb["state"]}], ["s"])["s"]
    assert np.allclose(st["mean"][:4], pooled["mean"]) and np.allclose(st["std"][:4], pooled["std"])
    assert np.allclose(st["mean"][:4], 1.5) and np.allclose(st["mean"][4:], 1.0) and np.allclose(st["std"][4:], 1.0)
    assert st["min"].tolist() == [-1.0] * 4 + [0.0] * 2 and st["max"].tolist() == [9.0] * 4 + [2.0] * 2
    assert st["count"].tolist() == [40]
    with pytest.raises(MixtureMismatch, match="no meta/stats.json"):
        canonical_stats(c, [sa, None])


def test_normalizer_is_lerobots_arithmetic():
    stats = {"x": _stats([1.0, 2.0], [0.5, 0.0], [0.0, 3.0], [4.0, 3.0], 5)}
    x = np.array([[2.0, 2.0], [0.0, 3.0]], dtype=np.float32)
    ms = Normalizer({"x": "mean_std"}, stats, "a")("x", x)
    assert np.array_equal(ms, (x - np.float32([1, 2])) / (np.float32([0.5, 0.0]) + np.float32(1e-8)))
    mm = Normalizer({"x": "min_max"}, stats, "a")("x", x)
    d = np.float32([4.0, 1e-8])  # max == min: eps, as LeRobot
    assert np.array_equal(mm, np.float32(2) * (x - np.float32([0, 3])) / d - np.float32(1)) and mm.dtype == np.float32
    with pytest.raises(ValueError, match="no min/max stats of 'y'"):
        Normalizer({"y": "min_max"}, stats, "a")
