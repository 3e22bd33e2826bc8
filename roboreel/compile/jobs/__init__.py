"""The work: one clip, one shard, and how they are scheduled across processes."""
