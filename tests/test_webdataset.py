"""Compiled shards read with webdataset (the ``roboreel[webdataset]`` extra, formats/wds.py): every episode's
members arrive with the bytes roboreel's index and reader hold, and a clip decodes to CompiledDataset's frames."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import webdataset as wds
from torchcodec.decoders import VideoDecoder

from roboreel.formats.manifest import load_manifest
from roboreel.formats.shard import split_member
from roboreel.formats.wds import shard_urls
from roboreel.reader import CompiledDataset
from roboreel.reader.fetch._source import SliceReader, Store
from roboreel.reader.plan._epoch import Slice

CAMERAS = ["observation.images.top", "observation.images.wrist"]


def wds_records(root: str) -> dict[int, dict[str, bytes]]:
    """Episode -> member extension -> bytes, as the docstring of formats/wds.py reads them."""
    out: dict[int, dict[str, bytes]] = {}
    for sample in wds.WebDataset(shard_urls(root), shardshuffle=False):
        episode = int(sample["__key__"])
        assert episode not in out, f"episode {episode} read twice"
        out[episode] = {k: v for k, v in sample.items() if not k.startswith("__")}
    return out


def test_shard_urls_are_the_index_shards_in_order(small_compiled):
    m = load_manifest(str(small_compiled))
    urls = shard_urls(str(small_compiled))
    assert urls == [f"{small_compiled}/{p}" for p in m.index.shards["path"]]
    assert urls == sorted(str(p) for p in (small_compiled / "shards").glob("*.tar"))
    assert shard_urls(str(small_compiled) + "/") == urls


def test_every_member_matches_the_index_and_the_reader(small_compiled):
    root = str(small_compiled)
    m = load_manifest(root)
    got = wds_records(root)
    assert sorted(got) == [e.index for e in m.episodes] == list(range(8))
    for e in m.episodes:
        # the index: same member set, sizes and sha256
        by_ext = {split_member(mi.name)[1]: mi for mi in e.members}
        assert set(got[e.index]) == set(by_ext) == {"json", "parquet", *(f"{c}.mp4" for c in CAMERAS)}
        for ext, mi in by_ext.items():
            data = got[e.index][ext]
            assert (len(data), hashlib.sha256(data).hexdigest()) == (mi.size, mi.sha256), (e.index, ext)
        meta = json.loads(got[e.index]["json"])
        assert meta["length"] == e.length and sorted(meta["cameras"]) == CAMERAS
        rows = pq.read_table(pa.BufferReader(got[e.index]["parquet"]))
        assert rows.num_rows == e.length
        assert rows.column("episode_index").to_pylist() == [e.index] * e.length
    # roboreel's own streaming reader: the same records, member for member
    reader = SliceReader(Store(root), m, verify=True)
    slices = [Slice(s, tuple(int(x) for x in m.index.shard_episodes(s))) for s in range(m.index.num_shards)]
    seen = 0
    for _, rec in reader.records(slices):
        members = {split_member(name)[1]: data for name, data in rec.to_members().items()}
        assert members == got[rec.index], rec.index
        # the rows as pyarrow's own reader reads them, schema metadata (``huggingface``) included
        assert rec.rows.equals(pq.read_table(pa.BufferReader(got[rec.index]["parquet"])), check_metadata=True)
        seen += 1
    assert seen == 8


def test_a_clip_read_with_webdataset_decodes_to_compileddataset_frames(small_compiled):
    root, cam, episode = str(small_compiled), CAMERAS[1], 5
    clip = wds_records(root)[episode][f"{cam}.mp4"]
    frames = VideoDecoder(clip).get_frames_in_range(0, load_manifest(root).episode(episode).length).data
    ds = CompiledDataset(root, episodes=[episode], shuffle=False, return_uint8=True)
    want = [(int(s["frame_index"]), s[cam]) for s in ds]
    assert [i for i, _ in want] == list(range(len(frames)))
    assert torch.equal(frames, torch.stack([f for _, f in want]))
