"""Tools for the sglang-gemma4 patch stack.

The stack is a pinned upstream SGLang wheel (``upstream.toml``) plus an ordered quilt series
(``patches/series``).  These tools turn the two into a git work tree (one commit per patch),
export edits back into patch files, and build an installable patched wheel.
"""
