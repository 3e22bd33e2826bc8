"""The rows: the data parquet (one row group per episode) and LeRobot's stats."""
