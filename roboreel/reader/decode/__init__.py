"""The decode room: compressed clips and frame requests in, frames out, on the CPU or a GPU.

- ``counters``: ``DecodeStats`` (every decoder's counters) and the seek modes.
- ``clips``: ``ClipDecoders`` and ``materialize``: decode in the consumer (the DataLoader worker).
- ``deferred``: workers ship compressed pending samples; the main process collates them into a ``PendingBatch``.
- ``stage`` / ``buffers``: ``roboreel.loader``'s decode threads writing into reused uint8 batch buffers.
- ``gpu`` / ``routing``: NVDEC decoders and the per-clip CPU fallback.
- ``runs``: decoded GOP runs waiting for their samples, under one byte budget.
- ``decoder_cache`` / ``idle_policy``: decoders kept open across epochs, and when.
- ``images``: image features' encoded images (plan's ``ImageRequest``) decoded and finished like LeRobot's.
- ``heap`` / ``forksafe``: the C heap kept flat over hundreds of epochs; forked workers never finalise the
  parent's garbage.

Imports formats/, itself and plan's requests (what it is asked to decode, plan/requests.py): never fetch/ or the
package face.
"""
