"""What every decoder shares: its seek mode and the counters it keeps (``DecodeStats``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SeekMode = Literal["approximate", "exact"]
SEEK_MODES = ("approximate", "exact")


@dataclass
class DecodeStats:
    decode_seconds: float = 0.0
    decoder_opens: int = 0
    decoder_reuses: int = 0
    decode_calls: int = 0
    frames_decoded: int = 0
