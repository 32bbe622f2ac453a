"""Moved to sglang_gemma4.results.archive; this name stays only until test/harness imports
read_archive from sglang_gemma4.results."""

from sglang_gemma4.results import read_archive

__all__ = ["read_archive"]
