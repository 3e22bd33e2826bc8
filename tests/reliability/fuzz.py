"""Hypothesis settings for the reliability fuzz tests: small, derandomized (reproducible) runs by default; 20x
more examples with fresh randomness under ``ROBOREEL_SLOW=1``. No example database is written."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SLOW = os.environ.get("ROBOREEL_SLOW") == "1"


def budget(examples: int) -> settings:
    return settings(max_examples=examples * (20 if SLOW else 1), derandomize=not SLOW, database=None,
                    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=16)
