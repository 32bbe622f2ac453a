# Importing patched_tree (test/patched_tree.py) puts the patched sglang first on sys.path before any test imports it.
import patched_tree  # noqa: F401
