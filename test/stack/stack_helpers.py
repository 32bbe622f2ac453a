"""Helpers for the tool tests: a throw-away checkout of this repository (slim copies of the verified
wheels that `make fetch` cached, and an upstream.toml pinning them: conftest.py) and synthetic
patches."""

import difflib
import hashlib
import subprocess
import sys
from pathlib import Path

from sglang_gemma4.cli import Stack
from sglang_gemma4.stack.layout import Layout
from sglang_gemma4.stack.pin import Pin

REPO = Path(__file__).resolve().parents[2]


def blob_id(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_patch(name: str, path: str, old: str, new: str, subject: str = "") -> str:
    """Patch text for changing repo file `path` from `old` to `new`, with a minimal header and the
    blob ids `git apply --3way` needs, as the series' own patches carry."""
    body = "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    )
    header = (
        f"From: T <t@example.com>\nSubject: {subject or name}\nAuthor: T <t@example.com>\n"
        "\nWhy: test.\n\n---\n"
    )
    return (
        header
        + f"diff --git a/{path} b/{path}\nindex {blob_id(old)}..{blob_id(new)} 100644\n"
        + body
    )


def replace_line(text: str, lineno: int, new_line: str) -> str:
    lines = text.splitlines(True)
    lines[lineno - 1] = new_line + "\n"
    return "".join(lines)


class Checkout:
    def __init__(self, root: Path):
        self.root = root
        self.layout = Layout(root)

    def stack(self) -> Stack:
        return Stack(self.layout)

    @property
    def pin(self) -> Pin:
        return Pin.load(self.layout.pin_file)

    def upstream_file(self, path: str) -> str:
        """A file of the pristine release, read from the cached wheel."""
        import zipfile

        wheel = self.layout.cache_dir / self.pin.wheel().file
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(path[len("python/") :]).decode()

    def write_series(self, patches: dict[str, str]) -> None:
        self.layout.patches_dir.mkdir(exist_ok=True)
        for old in self.layout.patches_dir.glob("*.patch"):
            old.unlink()
        for name, text in patches.items():
            (self.layout.patches_dir / name).write_text(text)
        self.layout.series_file.write_text("# test series\n" + "".join(f"{n}\n" for n in patches))

    def tool(self, *args: str) -> subprocess.CompletedProcess:
        """Run the CLI as a user would, in this checkout."""
        return subprocess.run(
            [sys.executable, "-m", "sglang_gemma4", *args],
            cwd=self.root,
            capture_output=True,
            text=True,
        )

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.layout.work_dir), *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
