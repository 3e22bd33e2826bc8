"""The fetch room: shard records in, one sequential stream per shard slice, local or remote.

- ``_source``: ``Store`` (fsspec) and ``SliceReader`` (tar records of a slice, retries below the tar layer).
- ``_prefetch``: a bounded background thread, so network reads and parquet parsing overlap decoding.

Imports formats/ and the plan room's ``Slice``; never decode/ or the package face.
"""

from roboreel.reader.fetch._prefetch import Prefetcher
from roboreel.reader.fetch._source import SliceReader, Store

__all__ = [
    "Prefetcher", "SliceReader", "Store",
]
