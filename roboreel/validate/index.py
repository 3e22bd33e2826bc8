"""Checks of a compiled dataset's index: the files the manifest names (size, sha256, readable) and that the
shard and episode tables agree with themselves.

Format 2 indexes are checked shard by shard (one shard's episode rows in memory at a time, a few row groups
cached), so validating a million-episode index needs bounded memory. Format 1 manifests, whose lists sit in the
JSON, get the same checks over those lists.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from roboreel.formats import manifest as mf
from roboreel.formats import shard as sh
from roboreel.formats.errors import CompiledFormatError
from roboreel.validate._io import Root
from roboreel.validate.report import Report


def check_index_files(root: Root, m: mf.Manifest, report: Report, *, fast: bool) -> bool:
    """Every index file exists with the recorded size (and sha256 unless ``fast``). False: the index cannot
    be trusted enough to check shards against it (a fatal finding was reported)."""
    if m.index_files is None:
        return True
    refs = [m.index_files["shards"], *m.index_files["episodes"]]
    ok = True
    for ref in refs:
        rel = ref["path"]
        if not root.exists(rel):
            report.fatal("index-missing", "index file named by roboreel.json does not exist", file=rel)
            ok = False
            continue
        size = root.size(rel)
        if size != ref["size"]:
            report.fatal("index-checksum-mismatch", f"{size} bytes, roboreel.json says {ref['size']}", file=rel)
            ok = False
        elif not fast:
            h = hashlib.sha256()
            with root.open(rel) as f:
                for block in iter(lambda f=f: f.read(1 << 20), b""):
                    h.update(block)
            if h.hexdigest() != ref["sha256"]:
                report.fatal("index-checksum-mismatch", "sha256 differs from roboreel.json", file=rel)
                ok = False
    return ok


def _check_entry(m: mf.Manifest, e: mf.EpisodeEntry, report: Report, rel: str) -> None:
    if e.to_index - e.from_index != e.length or e.length <= 0:
        report.error("manifest-inconsistent", f"from_index={e.from_index}, to_index={e.to_index} disagree with "
                     f"length={e.length}", file=rel, episode=e.index)
    names = {x.name for x in e.members}
    need = {sh.json_member(e.index), sh.rows_member(e.index)} | {sh.clip_member(e.index, c) for c in m.camera_keys}
    if need - names:
        report.error("manifest-inconsistent", f"member list lacks {sorted(need - names)}", file=rel, episode=e.index)


def _check_index(m: mf.Manifest, report: Report) -> None:
    """Format 2, column-wise a row group at a time (no per-episode objects: a million episodes in seconds):
    shard rows cover the episode rows in order, each episode names its shard, ranges agree with lengths, every
    record lists its members, totals agree with roboreel.json."""
    rel = mf.MANIFEST_NAME
    try:
        ix = m.index
        lengths = ix.lengths
        if len(lengths) != m.num_episodes or int(lengths.values.sum()) != m.total_frames:
            report.error("manifest-inconsistent", f"the index holds {len(lengths)} episodes and "
                         f"{int(lengths.values.sum())} frames, roboreel.json says {m.num_episodes} and "
                         f"{m.total_frames}", file=rel)
        counts, frames = ix.shards["episodes"], ix.shards["frames"]
        if int(counts.sum()) != len(lengths):
            report.error("manifest-inconsistent", f"the shard table counts {int(counts.sum())} episodes, the "
                         f"episode files hold {len(lengths)}", file=rel)
            return
        shard_of_row = np.repeat(np.arange(len(counts)), counts)
        sums = np.bincount(shard_of_row, weights=lengths.values, minlength=len(counts)).astype(np.int64)
        for pos in np.nonzero(sums != frames)[0]:
            report.error("manifest-inconsistent", f"shard {pos} ({ix.shards['path'][pos]}) says {int(frames[pos])} "
                         f"frames, its episodes add up to {int(sums[pos])}", file=rel)
        suffixes = [".json", ".parquet", *(f".{c}.mp4" for c in m.camera_keys)]
        for first, t in ix.group_tables():
            _check_rows_of(m, t, shard_of_row[first:first + t.num_rows], suffixes, report, rel)
    except CompiledFormatError as e:
        report.fatal("index-unreadable", str(e), file=e.file or rel)


def _check_rows_of(m: mf.Manifest, t: pa.Table, shard_of_row: np.ndarray, suffixes: list[str], report: Report,
                   rel: str) -> None:
    idx = t.column("index").to_numpy()
    bad = set(np.nonzero((t.column("to_index").to_numpy() - t.column("from_index").to_numpy()
                          != t.column("length").to_numpy()) | (t.column("length").to_numpy() <= 0))[0].tolist())
    wrong_shard = np.nonzero(t.column("shard").to_numpy() != shard_of_row)[0]
    for i in wrong_shard:
        report.error("manifest-inconsistent", f"shard {int(shard_of_row[i])} lists the episode, whose entry says "
                     f"shard {t.column('shard')[int(i)].as_py()}", file=rel, episode=int(idx[i]))
    members = t.column("members").combine_chunks()
    names = pc.list_flatten(members).field("name")
    keys = np.char.zfill(idx.astype(str), 6).astype(object)
    need = pa.array((np.repeat(keys, len(suffixes)) + np.tile(np.array(suffixes, dtype=object), len(idx))).tolist())
    present = pc.is_in(need, value_set=names).to_numpy(zero_copy_only=False).reshape(len(idx), len(suffixes))
    lacking = set(np.nonzero(~present.all(axis=1))[0].tolist())
    for i in sorted(bad | lacking):
        _check_entry(m, _entries_of_row(t, i), report, rel)


def _entries_of_row(t: pa.Table, i: int) -> mf.EpisodeEntry:
    row = t.slice(i, 1).to_pylist()[0]
    return mf.EpisodeEntry(**{**row, "tasks": row["tasks"] or [],
                              "members": [mf.MemberInfo(**x) for x in row["members"] or []]})


def _check_lists(m: mf.Manifest, report: Report) -> None:
    """Format 1: the episode and shard lists of the JSON agree with each other."""
    rel = mf.MANIFEST_NAME
    seen: dict[int, int] = {}
    for e in m.episodes:
        if e.index in seen:
            report.error("manifest-inconsistent", "episode listed twice", file=rel, episode=e.index)
        seen[e.index] = e.shard
        if not 0 <= e.shard < len(m.shards):
            report.error("manifest-inconsistent", f"shard {e.shard} is not one of the {len(m.shards)} shards",
                         file=rel, episode=e.index)
        _check_entry(m, e, report, rel)
    listed: set[int] = set()
    for pos, s in enumerate(m.shards):
        for ep in s.episodes:
            if ep in listed:
                report.error("manifest-inconsistent", "episode in two shards' lists", file=rel, episode=ep)
            elif ep not in seen:
                report.error("manifest-inconsistent", f"shard {pos} ({s.path}) lists the episode, which has no "
                             "entry in the manifest's episodes", file=rel, episode=ep)
            elif seen[ep] != pos:
                report.error("manifest-inconsistent", f"shard {pos} ({s.path}) lists the episode, whose entry says "
                             f"shard {seen[ep]}", file=rel, episode=ep)
            listed.add(ep)
    if set(seen) - listed:
        report.error("manifest-inconsistent", "episodes in no shard's list", file=rel, episodes=sorted(set(seen) - listed))


def check_manifest(m: mf.Manifest, report: Report, *, world_size: int, num_workers: int) -> None:
    """The manifest and its index agree with themselves; the shard count splits evenly over the readers."""
    if m.index_files is None:
        _check_lists(m, report)
    else:
        _check_index(m, report)
    if report.count("fatal"):
        return
    slots, n = world_size * num_workers, m.num_shards
    if n % slots:
        short = "some get none" if n < slots else f"{n % slots} get one shard more than the rest"
        report.warning("shards-uneven", f"{n} shards over world_size {world_size} x num_workers {num_workers} = "
                       f"{slots} readers: {short}", file=mf.MANIFEST_NAME)
