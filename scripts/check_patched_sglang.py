"""Exit non-zero, saying what to do, unless this python3 imports this stack's patched sglang."""

import sys

FIX = "install dist/sglang-*+gemma4.*.whl, or source /tmp/sglang-gemma4/env-patched.sh (offline bundle)"
try:
    import sglang
except ImportError as e:
    sys.exit(f"serve: {sys.executable} cannot import sglang ({e}): {FIX}")
version = getattr(sglang, "__version__", "unknown")
if "+gemma4" not in version:
    sys.exit(f"serve: {sys.executable} imports sglang {version}, not the patched build: {FIX}")
print(f"serve: sglang {version}")
