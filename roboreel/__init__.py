"""roboreel: compile LeRobot v3 datasets into stream-ready HEVC episode shards, and stream them into training."""

__version__ = "0.1.0"
