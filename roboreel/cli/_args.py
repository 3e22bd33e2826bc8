"""Option values parsed once for every verb that takes them, so a bad one is named by its flag (argparse's
"argument --weights: ...", exit 2) instead of surfacing as a bare conversion error."""

from __future__ import annotations

import argparse
import math


def weights(text: str) -> tuple[float, ...]:
    """``--weights W1,W2,...``: a mixture's draw weights, finite and >= 0 (the dataset checks the rest: one per
    member, not all zero)."""
    out = []
    for part in text.split(","):
        try:
            w = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} in {text!r} is not a number") from None
        if not math.isfinite(w) or w < 0:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} in {text!r}: weights are finite and >= 0")
        out.append(w)
    return tuple(out)


def weights_or_frames(text: str) -> tuple[float, ...] | str:
    """``--weights W1,W2,...|frames``: as ``weights``, or ``frames`` (each member by its frame count)."""
    return "frames" if text == "frames" else weights(text)
