"""Reading compiled shards with webdataset (``pip install 'roboreel[webdataset]'``).

A compiled dataset's shards are plain tars in webdataset's conventions (formats/shard.py): one record per episode,
keyed by the zero-padded episode index. So any webdataset pipeline reads them as they are, without roboreel's
reader; ``shard_urls`` lists them in episode order from the dataset's index::

    import webdataset as wds
    from roboreel.formats.wds import shard_urls

    for sample in wds.WebDataset(shard_urls("compiled/"), shardshuffle=False):
        sample["__key__"]                     # "000042": the episode index
        sample["json"]                        # episode metadata (JSON bytes: length, cameras, tasks, ...)
        sample["parquet"]                     # the episode's rows (parquet bytes, one row group)
        sample["observation.images.top.mp4"]  # one mp4 per camera (HEVC/AV1), frame k = episode frame k

The bytes are the members exactly as the index records them (size and sha256). What webdataset does not do is
what ``CompiledDataset`` adds: episode pools and frame sampling, ``delta_timestamps`` windows, resumable and
rank-aware order, checksums, retries and decoding. Use this for tools that want whole episodes (conversion,
inspection, custom pipelines); train with ``CompiledDataset`` / ``roboreel.loader``.

webdataset opens local paths and http(s) URLs itself; other fsspec URLs (s3://, hf://) need its ``pipe:`` form.
"""

from __future__ import annotations

from typing import Any

from roboreel.formats.manifest import load_manifest


def shard_urls(root: str, *, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The shard tars of the compiled dataset at ``root`` (path or URL), in episode order, for ``wds.WebDataset``.

    Read from the dataset's index rather than globbed, so a remote root works and a stray tar is never read."""
    manifest = load_manifest(root, storage_options=storage_options)
    base = str(root).rstrip("/")
    return [f"{base}/{path}" for path in manifest.index.shards["path"]]
