"""A port's adapted tests run with the repository's test helpers and fixtures: test/ and
test/patches/ on sys.path, the patched tree first (patched_tree), the GPU skip of test/conftest.py
and the fixtures of test/patches/conftest.py."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
for helpers in (REPO / "test", REPO / "test" / "patches"):
    if str(helpers) not in sys.path:
        sys.path.insert(0, str(helpers))

import patched_tree  # noqa: E402,F401


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_root = _load("sglang_gemma4_test_conftest", REPO / "test" / "conftest.py")
_patches = _load("sglang_gemma4_patches_conftest", REPO / "test" / "patches" / "conftest.py")
pytest_collection_modifyitems = _root.pytest_collection_modifyitems
globals().update({name: value for name, value in vars(_patches).items()
                  if type(value).__name__ == "FixtureFunctionDefinition"})
