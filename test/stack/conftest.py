"""Fixtures for the tool tests: a throw-away checkout per test."""

import shutil

import pytest
from stack_helpers import REPO, Checkout, make_patch, replace_line

from sglang_gemma4.stack.pin import Pin


@pytest.fixture
def checkout(tmp_path) -> Checkout:
    cache = REPO / ".cache" / "upstream"
    pin = Pin.load(REPO / "upstream.toml")
    if not (cache / pin.wheel().file).is_file():
        pytest.fail("the pinned wheel is not cached: run `make fetch` first")
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(REPO / "upstream.toml", root)
    (root / ".cache" / "upstream").mkdir(parents=True)
    for wheel in pin.wheels:  # copies: a test may corrupt its own
        source = cache / wheel.file
        if source.is_file():
            shutil.copy(source, root / ".cache" / "upstream" / wheel.file)
    return Checkout(root)


@pytest.fixture
def two_patches(checkout) -> dict[str, str]:
    """Two independent patches on real upstream files."""
    a, b = "python/sglang/srt/server_args.py", "python/sglang/version.py"
    old_a, old_b = checkout.upstream_file(a), checkout.upstream_file(b)
    patches = {
        "0010-first.patch": make_patch(
            "first", a, old_a, replace_line(old_a, 20, "# first patch was here")
        ),
        "0020-second.patch": make_patch("second", b, old_b, old_b + "# second patch was here\n"),
    }
    checkout.write_series(patches)
    return patches
