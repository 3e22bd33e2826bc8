"""The decode room: compressed clips and frame requests in, frames out, on the CPU or a GPU.

- ``requests``: what decode is asked for (``Clip``, ``FrameRequest``, ``PendingSample``, ``DecodeStats``).
- ``clips``: ``ClipDecoders`` and ``materialize``: decode in the consumer (the DataLoader worker).
- ``deferred``: workers ship compressed pending samples; the main process collates them into a ``PendingBatch``.
- ``stage`` / ``buffers``: ``roboreel.loader``'s decode threads writing into reused uint8 batch buffers.
- ``gpu`` / ``routing``: NVDEC decoders and the per-clip CPU fallback.
- ``runs``: decoded GOP runs waiting for their samples, under one byte budget.
- ``decoder_cache`` / ``idle_policy``: decoders kept open across epochs, and when.
- ``heap`` / ``forksafe``: the C heap kept flat over hundreds of epochs; forked workers never finalise the
  parent's garbage.

Imports only formats/ and itself: never plan/, fetch/ or the package face.
"""
