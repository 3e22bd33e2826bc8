"""The mixture room: several compiled datasets read as one stream, what ``CompiledDataset([a, b], ...)`` returns.

- ``_dataset``: ``MixtureDataset`` (a StreamCore), ``build_mixture`` (called by ``CompiledDataset.__new__`` for a
  list of paths), ``CanonicalOptions`` (remap, pad, normalize), ``MIXTURE_ONLY``.
- ``_plan``: ``MixturePlan``: each draw's member per (seed, epoch), each member's virtual stream, consumer draws,
  resume counts; pure, like plan/.
- ``_canonical``: members' keys, sizes and cameras mapped onto one set of canonical features.
- ``_samples``: a member's pending samples made canonical (renamed, padded, normalised, missing cameras filled);
  ``_blank``: the black clip a missing camera reads; ``_normalize``: a member's own normalisation.
- ``_windows``: canonical windows set on each member's own frame grid.
- ``_meta`` / ``_stats``: ``MixtureMeta``, the merged LeRobot-shaped metadata and aggregated stats.

Builds on the reader's face (a ``MemberStream`` per member, consumer.py; ``StreamCore``, stream.py), plan/ and
decode/; never dataset.py (its members are made there).
"""

from roboreel.reader.mixture._dataset import MIXTURE_ONLY, CanonicalOptions, MixtureDataset, build_mixture
from roboreel.reader.mixture._meta import MixtureMeta

__all__ = ["MIXTURE_ONLY", "CanonicalOptions", "MixtureDataset", "MixtureMeta", "build_mixture"]
