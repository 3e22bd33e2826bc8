"""``EncodeTarget``: what one camera's clip of one episode is to become, handed down the encode chain as one value.

The span's clip is chosen (transcode_span), encoded under the floor GOP by GOP or as whole clips
(encode_with_floor, _segments.py), and written by x265 (encode_clip): every level needs the same settings, frame
size, resize method, frame step, whether stats frames are kept, and which file and episode to name in an error.
They travel together here instead of as a dozen keywords repeated at each level; a lower CRF under the floor
is ``at_crf``, a new target with only that changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from roboreel.compile.settings import CompileSettings
from roboreel.compile.tables import stats_sample_indices
from roboreel.compile.video._resize import FILTER


@dataclass(frozen=True)
class EncodeTarget:
    """One clip's encode: ``settings`` (CRF, preset, GOP, B-frames, the PSNR floor, PSNR sampling), ``size``
    (height, width) to resize to with ``method`` (_resize.py; None: the source's size), ``step`` (source frames
    0, k, 2k, ... kept: the clip runs at the source's fps / k), ``stats`` (keep the frames LeRobot samples for
    image stats, ``Clip.stats_rgb``), and the source file (``where``) and ``episode`` every error names."""

    settings: CompileSettings
    where: str
    episode: int
    size: tuple[int, int] | None = None
    method: str = FILTER
    step: int = 1
    stats: bool = False

    def at_crf(self, crf: int) -> EncodeTarget:
        """This target at another CRF (the floor's next try)."""
        return EncodeTarget(self.settings.replace(crf=crf), self.where, self.episode, self.size, self.method,
                            self.step, self.stats)

    def stats_frames(self, length: int) -> Iterable[int]:
        """The frames of a clip of ``length`` whose encoder input is kept for the camera's stats."""
        return stats_sample_indices(length) if self.stats else ()
