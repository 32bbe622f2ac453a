"""Fixtures for the tool tests: a throw-away checkout per test, on slim copies of the pinned
wheels."""

import shutil
import zipfile
from pathlib import Path

import pytest
from stack_helpers import REPO, Checkout, make_patch, replace_line

from sglang_gemma4.stack.fetch import sha256_of
from sglang_gemma4.stack.pin import Pin

# What a slim wheel keeps of sglang: the package's and srt's own modules (the files the tests
# patch), the subpackages `import sglang` loads, one compiled module and the metadata. The tools
# treat a few hundred files as they treat thousands, but unpacking, committing and zipping the whole
# release in each test was most of these tests' time.
KEPT_SUBPACKAGES = (
    "sglang/lang/",
    "sglang/srt/utils/",
    "sglang/srt/platforms/",
    "sglang/srt/debug_utils/",
    "sglang/srt/observability/",
    "sglang/srt/plugins/",
)


def kept(name: str) -> bool:
    parts = name.split("/")
    return (
        parts[0].endswith(".dist-info")
        or len(parts) == 2
        or (len(parts) == 3 and parts[1] == "srt")
        or name.startswith(KEPT_SUBPACKAGES)
    )


def write_slim_wheel(source: Path, target: Path) -> None:
    with zipfile.ZipFile(source) as old:
        members = [m for m in old.infolist() if kept(m.filename)]
        compiled = [m for m in old.infolist() if m.filename.endswith(".so")]
        members.append(min(compiled, key=lambda m: m.file_size))
        names = {m.filename for m in members}
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as new:
            for member in members:
                data = old.read(member)
                if member.filename.endswith(".dist-info/RECORD"):
                    lines = data.decode().splitlines(True)
                    data = "".join(ln for ln in lines if ln.split(",", 1)[0] in names).encode()
                new.writestr(member, data)


@pytest.fixture(scope="session")
def slim_release(tmp_path_factory) -> Path:
    """A folder with a slim copy of each cached pinned wheel and an upstream.toml pinning them."""
    cache = REPO / ".cache" / "upstream"
    pin = Pin.load(REPO / "upstream.toml")
    if not (cache / pin.wheel().file).is_file():
        pytest.fail("the pinned wheel is not cached: run `make fetch` first")
    folder = tmp_path_factory.mktemp("slim-release")
    toml = (REPO / "upstream.toml").read_text()
    for wheel in pin.wheels:
        if (cache / wheel.file).is_file():
            write_slim_wheel(cache / wheel.file, folder / wheel.file)
            toml = toml.replace(wheel.sha256, sha256_of(folder / wheel.file))
    (folder / "upstream.toml").write_text(toml)
    return folder


@pytest.fixture
def checkout(tmp_path, slim_release) -> Checkout:
    root = tmp_path / "checkout"
    (root / ".cache" / "upstream").mkdir(parents=True)
    for path in slim_release.iterdir():  # copies: a test may corrupt its own
        target = root if path.name == "upstream.toml" else root / ".cache" / "upstream"
        shutil.copy(path, target / path.name)
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
