"""The command line as a shell uses it."""

import os
import signal
import subprocess
import sys

import pytest

from sglang_gemma4 import cli


def test_a_reader_that_closes_the_pipe_early_ends_the_tool_quietly(checkout, two_patches):
    """`sglang-gemma4 status | head -1`: the tool stops with SIGPIPE's status and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE, as after `head` has exited
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sglang_gemma4", "status"],
            cwd=checkout.root,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 128 + signal.SIGPIPE, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


def test_a_broken_pipe_that_is_not_stdout_still_fails_loudly(monkeypatch, capfd):
    """Only a closed stdout is quiet: a pipe or socket the command itself writes to is an error to
    report."""

    def broken(stack, args):
        raise BrokenPipeError("a download's socket")

    monkeypatch.setattr(cli, "cmd_version", broken)
    with pytest.raises(BrokenPipeError, match="download"):
        cli.main(["version"])
