"""Reading the source: frame-exact span decode, read-ahead on a thread, file checksums, episode fingerprints,
camera sizes, and the ``--fps`` grid."""

from roboreel.compile.source._decode import SourceVideo, SpanPackets
from roboreel.compile.source._features import camera_hw
from roboreel.compile.source._files import changed_files, episode_files, source_files
from roboreel.compile.source._fingerprint import episode_fingerprints
from roboreel.compile.source._overlap import read_ahead
from roboreel.compile.source._resample import (
    check_transform,
    frame_step,
    kept_length,
    resample_episodes,
    resample_rows,
)

__all__ = ["SourceVideo", "SpanPackets", "camera_hw", "changed_files", "check_transform", "episode_files",
           "episode_fingerprints", "frame_step", "kept_length", "read_ahead", "resample_episodes", "resample_rows",
           "source_files"]
