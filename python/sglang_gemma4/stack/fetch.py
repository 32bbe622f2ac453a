"""Download the pinned wheels with pip and keep only files whose sha256 matches the pin."""

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.pin import Pin, PinnedWheel


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _mismatch(path: Path, expected: str, actual: str, hint: str) -> StackError:
    return StackError(
        f"sha256 mismatch for {path.name}\n"
        f"  pinned (upstream.toml): {expected}\n"
        f"  found ({path}): {actual}\n"
        f"{hint}"
    )


def download(pin: Pin, wheel: PinnedWheel, dest_dir: Path) -> Path:
    """pip-download exactly `wheel.file` into dest_dir; return its path (not yet verified)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        wheel.python,
        "--implementation",
        "cp",
        "--abi",
        "cp" + wheel.python.replace(".", ""),
        "--platform",
        wheel.platform,
        "--dest",
        str(dest_dir),
        "--progress-bar",
        "off",
        pin.requirement,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    got = dest_dir / wheel.file
    if proc.returncode != 0 or not got.is_file():
        found = ", ".join(p.name for p in dest_dir.glob("*.whl")) or "nothing"
        raise StackError(
            f"pip could not download {wheel.file} ({pin.requirement}, Python {wheel.python}); "
            f"it saved {found}\n{proc.stderr.strip()[-2000:]}"
        )
    return got


def fetch_wheel(pin: Pin, wheel: PinnedWheel, cache_dir: Path, log=print) -> Path:
    """The verified cached wheel, downloading it first if it is not cached.

    A download lands in a temporary folder and moves into the cache only after its sha256
    matched, so a failure never leaves a partial or unverified file behind.
    """
    target = cache_dir / wheel.file
    if target.is_file():
        actual = sha256_of(target)
        if actual != wheel.sha256:
            raise _mismatch(
                target,
                wheel.sha256,
                actual,
                "The cached file is not the pinned release: delete it and run `make fetch`.",
            )
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    log(f"fetch: downloading {wheel.file} ...")
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as tmp:
        got = download(pin, wheel, Path(tmp))
        actual = sha256_of(got)
        if actual != wheel.sha256:
            raise _mismatch(
                got,
                wheel.sha256,
                actual,
                "PyPI served a different file than the pin names; nothing was cached.",
            )
        os.replace(got, target)
    log(f"fetch: {wheel.file} sha256 ok")
    return target


def fetch_all(pin: Pin, cache_dir: Path, log=print) -> list[Path]:
    return [fetch_wheel(pin, wheel, cache_dir, log) for wheel in pin.wheels]


MANYLINUX_X86_64 = [f"manylinux_2_{minor}_x86_64" for minor in range(40, 16, -1)] + [
    "manylinux2014_x86_64"
]


def download_release(name: str, version: str, python: str, dest_dir: Path) -> Path:
    """Any manylinux x86_64 wheel of name==version for `python` (for a rebase, whose files the pin
    does not name yet); the caller records the sha256 it gets."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--dest",
        str(dest_dir),
        "--progress-bar",
        "off",
        f"{name}=={version}",
    ]
    for platform in MANYLINUX_X86_64:
        cmd += ["--platform", platform]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dest_dir.glob(f"{name}-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        raise StackError(
            f"pip could not download {name}=={version} for Python "
            f"{python}:\n{proc.stderr.strip()[-2000:]}"
        )
    return found[-1]
