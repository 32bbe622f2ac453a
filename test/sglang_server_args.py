"""Command lines checked by the pinned sglang's own argument parsers, imported from the patched tree
(on CPU: the parsers need no GPU)."""

import argparse
import contextlib
import functools
import io
import shlex

import patched_tree  # noqa: F401  (the patched sglang first on sys.path)


@functools.cache
def _parser(with_bench_one_batch: bool) -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(allow_abbrev=False)  # a prefix of a flag is not that flag
    ServerArgs.add_cli_args(parser)
    if with_bench_one_batch:
        from sglang.bench_one_batch import BenchArgs

        BenchArgs.add_cli_args(parser)
    return parser


def parse_server_args(args: list[str], bench_one_batch: bool = False) -> argparse.Namespace:
    """The parsed arguments of sglang.launch_server (or sglang.bench_one_batch); AssertionError with
    sglang's own message for a flag or value it refuses."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parsed, unknown = _parser(bench_one_batch).parse_known_args(args)
    except SystemExit:
        raise AssertionError(
            f"sglang refuses {shlex.join(args)}: {stderr.getvalue().strip()}"
        ) from None
    assert not unknown, f"sglang does not know {unknown} in {shlex.join(args)}"
    return parsed
