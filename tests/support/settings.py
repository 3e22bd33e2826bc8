"""Compile settings the tests share: the fastest preset and two episodes per shard, so the small datasets give
several shards and every compile stays quick."""

from __future__ import annotations

from roboreel.compile import CompileSettings

FAST = CompileSettings(preset="ultrafast", episodes_per_shard=2)
