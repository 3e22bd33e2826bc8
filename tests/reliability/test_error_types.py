"""Errors keep their type, message and place (file, episode) when they cross process boundaries: compile's
process pool pickles them, and DataLoader workers re-raise them in the trainer by calling ``type(message)``."""

from __future__ import annotations

import pickle

import pytest
import torch

from roboreel.formats.errors import CompiledFormatError, FrameTimestampError, ShardReadError, SourceError
from roboreel.reader import CompiledDataset

from . import damage as D

ERRORS = [
    pytest.param(SourceError("missing file", file="data/x.parquet", episode=3), id="SourceError"),
    pytest.param(CompiledFormatError("bad member", file="shards/s.tar", episode=4), id="CompiledFormatError"),
    pytest.param(ShardReadError("kept failing", file="shards/s.tar", episode=5), id="ShardReadError"),
    pytest.param(FrameTimestampError(video="v.mp4", episode=6, queried_s=0.1, loaded_s=0.2, tolerance_s=1e-4),
                 id="FrameTimestampError"),
]


@pytest.mark.parametrize("error", ERRORS)
def test_errors_survive_pickling_with_their_place(error):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert back.episode == error.episode
    assert getattr(back, "file", None) == getattr(error, "file", None)
    assert getattr(back, "video", None) == getattr(error, "video", None)


@pytest.mark.parametrize("error", ERRORS)
def test_errors_rebuild_from_their_message(error):
    """What torch's DataLoader does with a worker's exception: ``type(error)(message)``."""
    rebuilt = type(error)(str(error))
    assert type(rebuilt) is type(error) and str(error) in str(rebuilt)


def test_reader_error_in_a_dataloader_worker_keeps_type_and_place(small_compiled, copy_of):
    root = copy_of(small_compiled, "out")
    fault = D.tar_member_missing(root)
    it = iter(torch.utils.data.DataLoader(CompiledDataset(str(root), shuffle=False), batch_size=None,
                                          num_workers=1))
    with pytest.raises(CompiledFormatError, match=rf"(?s)\(file {fault.file}, episode {fault.episode}\)"):
        for _ in it:
            pass
    assert list(it) == []  # drained: the worker ends at once instead of torch's 5 s shutdown timeout


def test_source_and_compiled_errors_are_siblings():
    """``except SourceError`` must not swallow a fault of the compiled output (nor the reverse)."""
    from roboreel.formats.errors import DataError, RoboreelError

    assert not issubclass(CompiledFormatError, SourceError) and not issubclass(SourceError, CompiledFormatError)
    assert not issubclass(ShardReadError, SourceError)
    for cls in (SourceError, CompiledFormatError, ShardReadError):
        assert issubclass(cls, DataError) and issubclass(cls, RoboreelError)


def test_a_compile_self_check_failure_is_a_compiled_format_error(small_source, tmp_path):
    """The compiler refuses a clip that does not hold the episode's frames: its own output's fault, not the
    source's, so it must not be reported as a SourceError."""
    from roboreel.compile.video import decode_clip

    with pytest.raises(CompiledFormatError) as err:
        decode_clip(b"not an mp4", length=3, fps=20, where="clip.mp4", episode=1)
    assert not isinstance(err.value, SourceError) and (err.value.file, err.value.episode) == ("clip.mp4", 1)
