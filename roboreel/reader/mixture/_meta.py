"""``MixtureMeta``: a mixture's metadata in LeRobot's shape (``LeRobotDatasetMetadata``'s fields), merged from its
members' ``DatasetMeta``: the features every member has (checked equal, formats/merge.py), the fps, stats
aggregated as LeRobot's ``aggregate_stats`` does, tasks merged (``task_index`` remapped in the samples), totals
summed; with canonical keys (_canonical.py) the canonical features, stats pooled without padding, and each
member's own stats (``member_stats``). What ``make_policy(cfg, ds_meta=...)`` and ``make_pre_post_processors(dataset_stats=...)`` read.

Member-level tables (meta/episodes) differ per member and have no merged form LeRobot reads: they stay on
``members[i].meta``. ``stats`` is a plain mutable dict, like ``DatasetMeta.stats`` (lerobot-train writes ImageNet
statistics into it).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from roboreel.formats.merge import aggregate_stats
from roboreel.reader.meta import DatasetMeta, FeatureKeys
from roboreel.reader.mixture._canonical import Canonical
from roboreel.reader.mixture._stats import canonical_stats, member_stats


class MixtureMeta(FeatureKeys):
    """Merged metadata of ``members`` (their ``DatasetMeta``), restricted to ``keys``, with ``tasks`` (the merged
    task strings by merged task_index)."""

    def __init__(self, members: Sequence[DatasetMeta], *, keys: Sequence[str], tasks: Sequence[str],
                 canon: Canonical | None = None) -> None:
        self.members = list(members)
        self.keys, self.task_names = list(keys), list(tasks)
        self.canon = canon  # the canonical features (_canonical.py); None: members' keys as they are
        self.repo_id = "+".join(m.repo_id for m in self.members)
        self._info: dict[str, Any] | None = None
        self._tasks: Any = None

    def __repr__(self) -> str:
        return f"MixtureMeta({[m.url for m in self.members]}, repo_id={self.repo_id!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tasks": None}

    @property
    def info(self) -> dict[str, Any]:
        """The first member's info.json with the common features and summed totals."""
        if self._info is None:
            info = copy.deepcopy(self.members[0].info)
            info["features"] = (dict(copy.deepcopy(self.canon.features)) if self.canon is not None else
                                {k: info["features"][k] for k in self.keys})
            info["total_episodes"] = sum(m.total_episodes for m in self.members)
            info["total_frames"] = sum(m.total_frames for m in self.members)
            info["total_tasks"] = len(self.task_names)
            self._info = info
        return self._info

    @property
    def robot_type(self) -> str | None:
        types = {m.robot_type for m in self.members}
        return types.pop() if len(types) == 1 else None

    @property
    def total_tasks(self) -> int:
        return len(self.task_names)

    def _read_stats(self) -> dict[str, dict[str, np.ndarray]] | None:
        """The members' stats of the common features, aggregated as LeRobot's ``aggregate_stats``; over canonical
        features, padded dimensions and missing cameras kept out (_stats.py)."""
        if self.canon is not None and not self.canon.identity:
            return canonical_stats(self.canon, [m.stats for m in self.members])
        return aggregate_stats([m.url for m in self.members], [m.stats for m in self.members], self.keys)

    def member_stats(self, index: int) -> dict[str, dict[str, np.ndarray]] | None:
        """Member ``index``'s own stats (its ``meta/stats.json``) under the canonical keys, its own sizes: what
        ``normalize=`` normalises its samples with, and what un-normalises a policy's output for that robot."""
        stats = self.members[index].stats
        return member_stats(self.canon, index, stats) if self.canon is not None else stats

    @property
    def tasks(self) -> Any:
        """The merged tasks as LeRobot loads them: a pandas DataFrame indexed by task, ``task_index`` column."""
        if self._tasks is None:
            import pandas as pd

            self._tasks = pd.DataFrame({"task_index": np.arange(len(self.task_names), dtype=np.int64)},
                                       index=pd.Index(self.task_names, name="task"))
        return self._tasks

    def get_task_index(self, task: str) -> int | None:
        return self.task_names.index(task) if task in self.task_names else None
