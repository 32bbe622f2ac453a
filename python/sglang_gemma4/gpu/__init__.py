"""The GPU half: Gemma-4-shaped checkpoints, the launch presets, the server harness (smoke, parity,
bench, profile, ...), prebuild and the kernel benchmarks. Runs on the GPU host from the offline
bundle; imports nothing from the stack half (the CLI joins the two)."""
