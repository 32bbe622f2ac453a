"""The pinned upstream release, read from upstream.toml."""

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.stack.errors import StackError


@dataclass(frozen=True)
class PinnedWheel:
    python: str  # "3.11"
    file: str
    sha256: str

    @property
    def platform(self) -> str:
        """The platform tag of the file name, e.g. manylinux_2_34_x86_64."""
        return self.file[: -len(".whl")].split("-")[-1]


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    wheels: tuple[PinnedWheel, ...]

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    @classmethod
    def load(cls, path: Path) -> "Pin":
        try:
            data = tomllib.loads(path.read_text())
            upstream = data["upstream"]
            wheels = tuple(
                PinnedWheel(python=w["python"], file=w["file"], sha256=w["sha256"].lower())
                for w in upstream["wheel"]
            )
            pin = cls(name=upstream["name"], version=upstream["version"], wheels=wheels)
        except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
            raise StackError(f"{path}: cannot read the pin ({e!r})") from e
        if not wheels:
            raise StackError(f"{path}: no [[upstream.wheel]] entries")
        return pin

    def wheel(self, python: str | None = None) -> PinnedWheel:
        """The wheel for `python` ("3.12"); default: this interpreter's, else the first pinned.

        The wheels' Python sources are identical, so any of them can seed the work tree.
        """
        wanted = python or f"{sys.version_info.major}.{sys.version_info.minor}"
        for wheel in self.wheels:
            if wheel.python == wanted:
                return wheel
        if python is None:
            return self.wheels[0]
        known = ", ".join(w.python for w in self.wheels)
        raise StackError(
            f"no pinned {self.requirement} wheel for Python {python} (pinned: {known})"
        )

    def render(self) -> str:
        """upstream.toml text for this pin (used by rebase to write the new pin)."""
        lines = [
            "# The upstream release this patch stack applies to. Nothing of upstream is committed "
            "here:",
            "# `make fetch` downloads exactly these files from PyPI and refuses any whose sha256 "
            "differs.",
            "",
            "[upstream]",
            f'name = "{self.name}"',
            f'version = "{self.version}"',
        ]
        for w in self.wheels:
            lines += [
                "",
                "[[upstream.wheel]]",
                f'python = "{w.python}"',
                f'file = "{w.file}"',
                f'sha256 = "{w.sha256}"',
            ]
        return "\n".join(lines) + "\n"
