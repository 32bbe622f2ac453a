"""The GPU half, by role: serve/ (the launch presets, checkpoints, one server of a build), checks/
(gates that pass or fail: parity, bad input, fuzzers, smoke, MTP greedy, ...), studies/ (A/B
benches, profiles, traces, memory and start-time reports), kernels/ (kernel benches and tuners);
above them stages/, the one table of GPU stages, and run.py, its runner. Runs on the GPU host from
the offline bundle; imports nothing from the stack half (the CLI joins the two)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # the repository this package sits in
