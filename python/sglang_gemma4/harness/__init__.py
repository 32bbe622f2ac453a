"""GPU-side harness: start and stop servers of either build, smoke checks, benchmarks."""
