"""compiled -> samples: stream a compiled roboreel dataset into PyTorch (``CompiledDataset``), decode batches on a
device in the main process (``DeviceLoader``, made by ``roboreel.loader``), and a reference map-style reader over
LeRobot v3 sources (``ReferenceDataset``) that follows the same sample contract."""

from roboreel.reader.dataset import CompiledDataset
from roboreel.reader.loader import DeviceLoader
from roboreel.reader.reference import ReferenceDataset

__all__ = ["CompiledDataset", "DeviceLoader", "ReferenceDataset"]
