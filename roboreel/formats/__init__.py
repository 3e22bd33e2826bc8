"""What bytes mean: the LeRobot v3 source layout and roboreel's compiled format. No torch, no decoding."""
