"""Tools for the sglang-gemma4 patch stack, in two halves joined only by the CLI (cli.py):

- ``stack``: the pinned upstream SGLang wheel (``upstream.toml``) plus an ordered quilt series
  (``patches/series``) turned into a git work tree (one commit per patch), edits exported back into
  patch files, an installable patched wheel, the offline bundle, rebases onto newer releases;
- ``gpu``: what runs on the GPU host: checkpoints, launch presets, the server harness, benchmarks.
"""
