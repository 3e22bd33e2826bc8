"""Benchmarks: dataloading (compiled vs source baselines) and compile throughput. See docs/benchmarks.md."""
