"""compiled -> samples: stream a compiled roboreel dataset into PyTorch (``CompiledDataset``, its options
``StreamOptions`` / ``DecodeOptions`` and LeRobot-shaped ``DatasetMeta``; ``CompiledDataset([a, b], ...)`` gives a
``MixtureDataset``), and decode batches on a device in the main process (``DeviceLoader``, made by
``roboreel.loader``). The reference reader over LeRobot v3 sources, a
baseline and test oracle, lives in ``roboreel.bench.reference``."""

from roboreel.reader.dataset import CompiledDataset
from roboreel.reader.loader import DeviceLoader
from roboreel.reader.meta import DatasetMeta
from roboreel.reader.mixture import MixtureDataset
from roboreel.reader.options import DecodeOptions, StreamOptions

__all__ = ["CompiledDataset", "DatasetMeta", "DecodeOptions", "DeviceLoader", "MixtureDataset", "StreamOptions"]
