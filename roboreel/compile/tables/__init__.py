"""The rows: the compiled data parquet (one row group per episode) and LeRobot's stats, ported."""

from roboreel.compile.tables._rowgroups import episode_row_groups, write_episode_rows
from roboreel.compile.tables._stats import (
    dataset_stats,
    downsample,
    episode_columns,
    image_stats,
    rows_stats,
    stats_sample_indices,
    stats_to_json,
)

__all__ = ["dataset_stats", "downsample", "episode_columns", "episode_row_groups", "image_stats", "rows_stats",
           "stats_sample_indices", "stats_to_json", "write_episode_rows"]
