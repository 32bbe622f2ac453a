"""Where things live in a checkout of this repository."""

import os
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.stack.errors import StackError

PIN_FILE = "upstream.toml"


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def pin_file(self) -> Path:
        return self.root / PIN_FILE

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @property
    def series_file(self) -> Path:
        return self.patches_dir / "series"

    @property
    def cache_dir(self) -> Path:
        """Verified upstream wheels (ignored by git)."""
        return self.root / ".cache" / "upstream"

    @property
    def work_dir(self) -> Path:
        """The git work tree: pristine upstream plus one commit per patch (ignored by git)."""
        return self.root / "work" / "sglang"

    @property
    def dist_dir(self) -> Path:
        return self.root / "dist"

    @classmethod
    def discover(cls, start: Path | None = None) -> "Layout":
        """The checkout holding upstream.toml: $SGLANG_GEMMA4_ROOT, else the nearest parent."""
        env_root = os.environ.get("SGLANG_GEMMA4_ROOT")
        if env_root:
            return cls(Path(env_root).resolve())
        here = (start or Path.cwd()).resolve()
        for candidate in (here, *here.parents):
            if (candidate / PIN_FILE).is_file():
                return cls(candidate)
        raise StackError(f"no {PIN_FILE} found in {here} or its parents; run from the repository")
