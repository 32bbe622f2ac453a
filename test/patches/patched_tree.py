"""Per-patch tests import sglang from a patched tree: $SGLANG_GEMMA4_TREE (set by
`sglang-gemma4 verify-tests`) or the work tree `make apply` made.  Never from site-packages."""

import os
import sys
from pathlib import Path

TREE = Path(os.environ.get("SGLANG_GEMMA4_TREE", Path(__file__).resolve().parents[2] / "work" / "sglang"))
if not (TREE / "python" / "sglang" / "__init__.py").is_file():
    raise RuntimeError(f"no sglang tree at {TREE}: run `make apply` first")
sys.path.insert(0, str(TREE / "python"))
