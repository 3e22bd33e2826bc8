"""The decode room: compressed clips and frame requests in, frames out, on the CPU or a GPU.

- ``_counters``: ``DecodeStats`` (every decoder's counters) and the seek modes.
- ``_clips``: ``ClipDecoders`` and ``materialize``: decode in the consumer (the DataLoader worker).
- ``_deferred``: workers ship compressed pending samples; the main process collates them into a ``PendingBatch``.
- ``_stage`` / ``_layout`` / ``_buffers``: ``roboreel.loader``'s decode threads writing into reused uint8 batch
  buffers laid out as ``BatchLayout`` says.
- ``_gpu`` / ``_routing``: NVDEC decoders and the per-clip CPU fallback.
- ``_runs``: decoded GOP runs waiting for their samples, under one byte budget.
- ``_decoder_cache`` / ``_idle_policy``: decoders kept open across epochs, and when.
- ``_images``: image features' encoded images (plan's ``ImageRequest``) decoded and finished like LeRobot's.
- ``_heap`` / ``_forksafe``: the C heap kept flat over hundreds of epochs; forked workers never finalise the
  parent's garbage.

Imports formats/, itself and plan's requests (what it is asked to decode, plan/_requests.py): never fetch/ or the
package face.
"""

from roboreel.reader.decode._buffers import BufferPool
from roboreel.reader.decode._clips import ClipDecoders, materialize
from roboreel.reader.decode._deferred import PendingBatch, collate_pending, ship_once
from roboreel.reader.decode._forksafe import isolate_inherited_heap
from roboreel.reader.decode._gpu import DEFAULT_MAX_GPU_DECODERS, DeviceDecoders
from roboreel.reader.decode._heap import (
    DECODE_CALL_BYTES,
    DECODE_MMAP_THRESHOLD_BYTES,
    DECODE_TRIM_THRESHOLD_BYTES,
    pin_mmap_threshold,
    release_free_memory,
    trim_heap,
)
from roboreel.reader.decode._idle_policy import IdlePolicy, camera_lanes, idle_bytes_needed
from roboreel.reader.decode._images import NO_IMAGE_CLIPS, ImageClips, finish_images
from roboreel.reader.decode._layout import BatchLayout
from roboreel.reader.decode._mixing import grouped
from roboreel.reader.decode._routing import DecodeFallback, Router, resolve_decode_device
from roboreel.reader.decode._runs import (
    DEFAULT_GPU_RUN_CACHE_BYTES,
    DEFAULT_RUN_CACHE_BYTES,
    RunBudget,
    auto_run_cache_bytes,
)
from roboreel.reader.decode._stage import (
    BatchJob,
    DecodePool,
    default_decode_threads,
    default_inflight_batches,
)
from roboreel.reader.decode._unit import unit_float

__all__ = [
    "BatchJob", "BatchLayout", "BufferPool", "ClipDecoders", "DECODE_CALL_BYTES", "DECODE_MMAP_THRESHOLD_BYTES",
    "DECODE_TRIM_THRESHOLD_BYTES", "DEFAULT_GPU_RUN_CACHE_BYTES", "DEFAULT_MAX_GPU_DECODERS",
    "DEFAULT_RUN_CACHE_BYTES", "DecodeFallback", "DecodePool", "DeviceDecoders", "IdlePolicy", "ImageClips",
    "NO_IMAGE_CLIPS", "PendingBatch", "Router", "RunBudget", "auto_run_cache_bytes", "camera_lanes", "collate_pending",
    "default_decode_threads", "default_inflight_batches", "finish_images", "grouped", "idle_bytes_needed",
    "isolate_inherited_heap", "materialize", "pin_mmap_threshold", "release_free_memory",
    "resolve_decode_device", "ship_once", "trim_heap", "unit_float",
]
