"""CompiledDataset's option groups (reader/options.py): checked where made, frozen, and the only spelling of
their knobs (no flat keywords)."""

from __future__ import annotations

import dataclasses

import pytest

import roboreel
from roboreel.formats.transient import Retry
from roboreel.reader import CompiledDataset, DecodeOptions, StreamOptions


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
                       (lambda: DecodeOptions(idle_decoders_mb="auto"), "idle_decoders_mb must be a number >= 0")):
        with pytest.raises(ValueError, match=match):
            bad()


def test_idle_decoders_default_to_automatic_and_take_none_zero_or_a_bound():
    """None (the default) is the automatic mode (reader/decode/_idle_policy.py); 0 and a number are explicit bounds."""
    assert DecodeOptions().idle_decoders_mb is None
    assert [DecodeOptions(idle_decoders_mb=v).idle_decoders_mb for v in (None, 0, 0.5, 64)] == [None, 0, 0.5, 64]


def test_groups_reach_the_dataset(small_compiled):
    stream = StreamOptions(retries=2, backoff_s=0.01, readahead=3, verify_checksums=False)
    decode = DecodeOptions(batch=4, cache_mb=0, tolerance_s=2e-4, idle_decoders_mb=1)
    ds = CompiledDataset(str(small_compiled), stream=stream, decode=decode, frame_order="random", spread=5)
    assert ds.stream_options is stream and ds.decode_options is decode
    assert (stream.retry, stream.readahead, stream.verify_checksums) == (Retry(2, 0.01), 3, False)
    assert (decode.batch, decode.run_cache_bytes, ds.frame_order, ds.spread, decode.tolerance_s, ds.decode_device,
            decode.idle_decoders_bytes) == (4, 0, "random", 5, 2e-4, "cpu", 2**20)
    assert stream.retry == Retry(retries=2, backoff_s=0.01) and StreamOptions().retry == Retry()
    default = CompiledDataset(str(small_compiled))
    assert default.stream_options == StreamOptions() and default.decode_options == DecodeOptions()


def test_flat_or_unknown_keywords_and_wrong_groups_are_refused(small_compiled):
    for flat in ({"retries": 2}, {"decode_device": "cpu"}, {"fallback": "cpu"}, {"retry": 2}):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{next(iter(flat))}'"):
            CompiledDataset(str(small_compiled), **flat)
    with pytest.raises(TypeError, match=r"decode=\.\.\.\) takes a roboreel.DecodeOptions, got StreamOptions"):
        CompiledDataset(str(small_compiled), decode=StreamOptions())
    with pytest.raises(ValueError, match="episode_pool_size must be an integer >= 1"):
        CompiledDataset(str(small_compiled), episode_pool_size=0)
