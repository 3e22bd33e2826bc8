"""The work: one (episode, camera) clip, one shard packed from its clips and rows, and how they are scheduled
(inline, or across processes whose logs come back to the parent)."""

from roboreel.compile.jobs._clips import ClipJob, forget_sources
from roboreel.compile.jobs._schedule import run_inline, run_pool
from roboreel.compile.jobs._shardjob import ShardJob

__all__ = ["ClipJob", "ShardJob", "forget_sources", "run_inline", "run_pool"]
