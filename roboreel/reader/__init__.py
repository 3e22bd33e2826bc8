"""compiled -> samples: stream a compiled roboreel dataset into PyTorch (``CompiledDataset``), and a reference
map-style reader over LeRobot v3 sources (``ReferenceDataset``) that follows the same sample contract."""

from roboreel.reader.dataset import CompiledDataset
from roboreel.reader.reference import ReferenceDataset

__all__ = ["CompiledDataset", "ReferenceDataset"]
