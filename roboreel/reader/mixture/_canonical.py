"""A mixture's canonical keys: robots with other camera names, state/action sizes and cameras made to batch.

Every member's features are renamed into one set of *canonical* keys (``remap``: per member ``{own key: new key}``,
``None`` drops a key), then made alike, as openpi, GR00T and Octo do inside their own loaders:

- a 1-D feature whose size differs between members (``state`` of a 6-DoF arm and of a 14-DoF bimanual one) is
  zero-padded at the end to the largest size (``pad="max"``) and carries ``<key>_dim_is_pad`` (bool ``[D]``, True
  where padded): the values a member has are its own, exactly;
- a camera (clip) some member lacks is, in that member's samples, zeros of the canonical shape, and every sample
  carries ``<camera>_is_missing`` (a bool scalar): True where the member lacks it;
- a non-camera feature some member lacks is left out of the mixture (named in a warning), as before: there is no
  neutral value for, say, a gripper force that one robot never measured.

Cameras mapped to one key must share a size (a clear error names both members and ``roboreel compile --resize``),
as must features that are not 1-D. Pure functions of the members' feature dicts: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roboreel.formats.merge import MixtureMismatch

RESERVED = ("index", "episode_index", "frame_index", "timestamp", "task_index")  # the reader's own columns
PAD_MODES = ("max",)
_CAMERA_DTYPES = ("video", "image")


@dataclass(frozen=True)
class MemberMap:
    """How one member's samples become canonical: ``rename`` (own key -> canonical, every feature it keeps),
    ``pad`` (canonical 1-D key -> the member's own size, where smaller than the canonical one), ``missing``
    (canonical cameras it lacks), ``cameras`` / ``tabular`` (its own keys it reads)."""

    url: str
    rename: dict[str, str]
    pad: dict[str, int] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    cameras: tuple[str, ...] = ()
    tabular: tuple[str, ...] = ()

    @property
    def own(self) -> dict[str, str]:
        """Canonical key -> the member's own key."""
        return {v: k for k, v in self.rename.items()}


@dataclass(frozen=True)
class Canonical:
    """The canonical features of a mixture and each member's map into them."""

    features: dict[str, dict[str, Any]]  # canonical key -> LeRobot feature (a padded one's shape is the largest)
    cameras: tuple[str, ...]  # canonical camera (clip) keys, in feature order
    sizes: dict[str, int]  # padded 1-D features -> their canonical size
    members: tuple[MemberMap, ...]
    dropped: dict[str, list[str]]  # member url -> its own keys left out (not a feature of every member)

    @property
    def missing_cameras(self) -> tuple[str, ...]:
        """Cameras some member lacks: the ones every sample carries ``<camera>_is_missing`` for."""
        return tuple(c for c in self.cameras if any(c in m.missing for m in self.members))

    @property
    def identity(self) -> bool:
        """Nothing renamed, padded or missing: samples pass through unchanged."""
        return not self.sizes and not self.missing_cameras and all(
            all(k == v for k, v in m.rename.items()) for m in self.members)


def _shape(feature: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in feature.get("shape") or ())


def renames(url: str, features: Mapping[str, Any], remap: Mapping[str, str | None] | None) -> dict[str, str]:
    """A member's ``{own key: canonical key}`` under its ``remap``: every key it has that ``remap`` does not drop."""
    remap = {} if remap is None else remap
    if not isinstance(remap, Mapping):
        raise ValueError(f"remap of {url} must be a dict {{old key: new key or None}}, got {type(remap).__name__}")
    unknown = [k for k in remap if k not in features]
    if unknown:
        raise MixtureMismatch(f"remap of {url} names {unknown}, which it does not have; its features: "
                              f"{list(features)}")
    reserved = [k for k in remap if k in RESERVED and remap[k] != k]
    if reserved:
        raise ValueError(f"remap of {url} renames or drops {reserved}: the reader's own columns {list(RESERVED)} "
                         "keep their names")
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for k in features:
        new = remap.get(k, k)
        if new is None:
            continue
        if not isinstance(new, str) or not new:
            raise ValueError(f"remap of {url}: {k!r} -> {new!r}; a new key is a non-empty string, or None to drop it")
        if new in seen:
            raise MixtureMismatch(f"remap of {url} maps {seen[new]!r} and {k!r} to one key {new!r}; drop one "
                                  "(None)")
        seen[new] = k
        out[k] = new
    return out


def canonical(urls: Sequence[str], features: Sequence[Mapping[str, Mapping[str, Any]]],
              camera_keys: Sequence[Sequence[str]], remap: Sequence[Mapping[str, str | None] | None] | None = None,
              pad: str | None = None) -> Canonical:
    """The canonical features of members ``urls`` (their ``features`` and clip ``camera_keys``), see the module doc.

    Raises ``MixtureMismatch`` naming both members where a key cannot be made alike."""
    n = len(urls)
    if remap is not None and (isinstance(remap, Mapping) or len(remap) != n):
        raise ValueError(f"remap takes one dict (or None) per dataset of the mixture, {n} in all, got {remap!r:.200}")
    if pad is not None and pad not in PAD_MODES:
        raise ValueError(f"pad={pad!r}: expected None (sizes must match) or one of {list(PAD_MODES)}")
    names = [renames(u, f, None if remap is None else remap[i])
             for i, (u, f) in enumerate(zip(urls, features, strict=True))]
    holders: dict[str, list[tuple[int, str]]] = {}
    for i, rename in enumerate(names):
        for own, c in rename.items():
            holders.setdefault(c, []).append((i, own))
    out: dict[str, dict[str, Any]] = {}
    cameras: list[str] = []
    sizes: dict[str, int] = {}
    missing: list[list[str]] = [[] for _ in range(n)]
    dropped: dict[str, list[str]] = {}
    for c, have in holders.items():
        (i0, k0), f0 = have[0], features[have[0][0]][have[0][1]]
        is_cam = [own in camera_keys[i] for i, own in have]
        for (i, own), cam in zip(have[1:], is_cam[1:], strict=True):
            f = features[i][own]
            where = f"{c!r} ({urls[i0]}: {k0!r}, {urls[i]}: {own!r})"
            if cam != is_cam[0]:
                raise MixtureMismatch(f"feature {where} is stored as clips in one dataset and as encoded images in "
                                      "the other; compile them with the same --images")
            if f.get("dtype") != f0.get("dtype"):
                raise MixtureMismatch(f"feature {where} is {f0.get('dtype')} in the first but {f.get('dtype')} in "
                                      "the second")
        if is_cam[0]:
            _same_shape(c, have, features, urls, hint=True)
            cameras.append(c)
            for i in set(range(n)) - {i for i, _ in have}:
                missing[i].append(c)
            out[c] = copy.deepcopy(f0)
            continue
        if len(have) < n:
            for i, own in have:
                dropped.setdefault(urls[i], []).append(own)
            continue
        shapes = {_shape(features[i][own]) for i, own in have}
        if len(shapes) > 1 and pad == "max" and all(len(s) == 1 for s in shapes):
            size = max(s[0] for s in shapes)
            sizes[c] = size
            widest = max(have, key=lambda h: _shape(features[h[0]][h[1]])[0])
            out[c] = copy.deepcopy(features[widest[0]][widest[1]])
            continue
        _same_shape(c, have, features, urls, hint=f0.get("dtype") in _CAMERA_DTYPES)
        out[c] = copy.deepcopy(f0)
    maps = []
    for i, rename in enumerate(names):
        pads = {c: _shape(features[i][own])[0] for own, c in rename.items() if c in sizes
                and _shape(features[i][own])[0] < sizes[c]}
        kept = {own: c for own, c in rename.items() if c in out}
        maps.append(MemberMap(urls[i], kept, pads, tuple(missing[i]),
                              tuple(own for own, c in kept.items() if c in cameras),
                              tuple(own for own, c in kept.items() if c not in cameras)))
    return Canonical(out, tuple(cameras), sizes, tuple(maps), dropped)


def _same_shape(key: str, have: list[tuple[int, str]], features: Sequence[Mapping[str, Mapping[str, Any]]],
                urls: Sequence[str], *, hint: bool) -> None:
    (i0, k0) = have[0]
    a = _shape(features[i0][k0])
    for i, own in have[1:]:
        b = _shape(features[i][own])
        if a != b:
            fix = (": recompile one with `roboreel compile SRC OUT --resize HxW` so both cameras have the same size"
                   if hint else (": pad='max' zero-pads 1-D features to the largest size" if len(a) == len(b) == 1
                                 else ""))
            raise MixtureMismatch(f"feature {key!r} is {list(a)} in {urls[i0]} ({k0!r}) but {list(b)} in {urls[i]} "
                                  f"({own!r}){fix}")
