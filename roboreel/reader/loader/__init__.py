"""The loader room: ``roboreel.loader`` and ``DeviceLoader``, the way to train: DataLoader workers ship pending
samples, this process decodes whole batches (CPU threads or a GPU) and delivers them on the training device.

- ``_loader``: ``loader`` / ``DeviceLoader``: the DataLoader of pending batches, epochs, ``state_dict``.
- ``_stage``: ``DecodeStage``: the background thread feeding decode/'s pool and finishing batches in order.
"""

from roboreel.reader.loader._loader import DeviceLoader, loader

__all__ = ["DeviceLoader", "loader"]
