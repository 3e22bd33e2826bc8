"""CompiledDataset's option groups (reader/options.py): checked where made, frozen, and the old flat keywords
still working with a DeprecationWarning that spells the new call."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

import roboreel
from roboreel.reader import CompiledDataset, DecodeOptions, StreamOptions
from roboreel.reader.options import LEGACY


def test_groups_are_exported_frozen_and_checked():
    assert roboreel.StreamOptions is StreamOptions and roboreel.DecodeOptions is DecodeOptions
    with pytest.raises(dataclasses.FrozenInstanceError):
        StreamOptions().retries = 1
    for bad, match in ((lambda: StreamOptions(readahead=0), "readahead must be an integer >= 1, got 0"),
                       (lambda: StreamOptions(retries=-1), "retries must be an integer >= 0"),
                       (lambda: StreamOptions(backoff_s=-0.1), "backoff_s must be a number >= 0"),
                       (lambda: StreamOptions(verify_checksums="yes"), "verify_checksums must be a bool"),
                       (lambda: StreamOptions(storage_options=["a"]), "storage_options must be a mapping"),
                       (lambda: DecodeOptions(fallback="gpu"), "fallback must be one of"),
                       (lambda: DecodeOptions(batch=0), "DecodeOptions.batch must be an integer >= 1"),
                       (lambda: DecodeOptions(batch=True), "DecodeOptions.batch must be an integer"),
                       (lambda: DecodeOptions(cache_mb=-1), "cache_mb must be a number >= 0, got -1"),
                       (lambda: DecodeOptions(idle_decoders_mb=-1), "idle_decoders_mb must be a number >= 0"),
                       (lambda: DecodeOptions(idle_decoders_mb="auto"), "idle_decoders_mb must be a number >= 0"),
                       (lambda: DecodeOptions(frame_order="gop"), "frame_order must be one of")):
        with pytest.raises(ValueError, match=match):
            bad()


def test_idle_decoders_default_to_automatic_and_take_none_zero_or_a_bound():
    """None (the default) is the automatic mode (reader/decode/idle_policy.py); 0 and a number are explicit bounds."""
    assert DecodeOptions().idle_decoders_mb is None
    assert [DecodeOptions(idle_decoders_mb=v).idle_decoders_mb for v in (None, 0, 0.5, 64)] == [None, 0, 0.5, 64]


def test_every_group_field_has_its_legacy_keyword():
    fields = {(g, f.name) for g, cls in (("stream", StreamOptions), ("decode", DecodeOptions))
              for f in dataclasses.fields(cls)}
    new = {("decode", "idle_decoders_mb")}  # added after the flat keywords: it never had one
    assert set(LEGACY.values()) == fields - new


def test_old_keywords_warn_with_the_new_spelling_and_mean_the_same(small_compiled):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns about nothing
        new = CompiledDataset(str(small_compiled), stream=StreamOptions(retries=2, backoff_s=0.01, readahead=3),
                              decode=DecodeOptions(batch=4, cache_mb=0, frame_order="random", tolerance_s=2e-4))
    with pytest.warns(DeprecationWarning) as caught:
        old = CompiledDataset(str(small_compiled), retries=2, backoff_s=0.01, readahead=3, decode_batch=4,
                              decode_cache_mb=0, frame_order="random", tolerance_s=2e-4)
    (w,) = caught
    assert w.filename == __file__  # points at the caller's line
    assert "pass stream=StreamOptions(retries=2, backoff_s=0.01, readahead=3), decode=DecodeOptions(batch=4, " \
           "cache_mb=0, frame_order='random', tolerance_s=0.0002)" in str(w.message)
    assert old.stream_options == new.stream_options and old.decode_options == new.decode_options
    for attr in ("retries", "backoff_s", "readahead", "decode_batch", "decode_cache_bytes", "frame_order",
                 "tolerance_s", "decode_device", "verify_checksums"):
        assert getattr(old, attr) == getattr(new, attr), attr
    assert new.decode_cache_bytes == 0 and new.frame_order == "random" and new.readahead == 3
    # same stream, so resume states are interchangeable
    assert old.state_dict() == new.state_dict()


def test_mixed_or_unknown_keywords_are_refused(small_compiled):
    with pytest.raises(TypeError, match=r"got retries= and stream=: pass stream=StreamOptions\(\.\.\., retries=\.\.\.\)"):
        CompiledDataset(str(small_compiled), stream=StreamOptions(), retries=2)
    with pytest.raises(TypeError, match="unexpected keyword argument.*'retry'"):
        CompiledDataset(str(small_compiled), retry=2)
    with pytest.raises(TypeError, match=r"decode=\.\.\.\) takes a roboreel.DecodeOptions, got StreamOptions"):
        CompiledDataset(str(small_compiled), decode=StreamOptions())
    with pytest.raises(ValueError, match="episode_pool_size must be an integer >= 1"):
        CompiledDataset(str(small_compiled), episode_pool_size=0)
