"""Per-patch tests import sglang from a patched tree: $SGLANG_GEMMA4_TREE (set by
`sglang-gemma4 verify-tests`) or the work tree `make apply` made.  Never from site-packages."""

import importlib.abc
import importlib.machinery
import os
import sys
import types
from pathlib import Path

TREE = Path(
    os.environ.get("SGLANG_GEMMA4_TREE", Path(__file__).resolve().parents[1] / "work" / "sglang")
)
if not (TREE / "python" / "sglang" / "__init__.py").is_file():
    raise RuntimeError(f"no sglang tree at {TREE}: run `make apply` first")
sys.path.insert(0, str(TREE / "python"))


class _CudaOnlyModule(types.ModuleType):
    """Stands in for a CUDA extension package on machines without a GPU driver: importing names
    from it works, calling them raises."""

    __path__: list = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*args, **kwargs):
            raise RuntimeError(f"{self.__name__}.{name} needs a CUDA GPU")

        return unavailable


class _CudaOnlyFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves stand-ins for the named modules only: the rest of the package stays unimportable,
    so sglang's own `except ImportError` CPU fallbacks still apply."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path, target=None):
        if fullname in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _CudaOnlyModule(spec.name)

    def exec_module(self, module):
        pass


# sgl_kernel (sglang-kernel) loads CUDA libraries at import. sglang imports these of its modules
# with no fallback on the way to its scheduler and tokenizer manager (host KV pools).
CUDA_ONLY_IMPORTS = {"sgl_kernel", "sgl_kernel.kvcacheio"}
try:
    import sgl_kernel  # noqa: F401
except ImportError:
    for name in [m for m in sys.modules if m == "sgl_kernel" or m.startswith("sgl_kernel.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _CudaOnlyFinder(CUDA_ONLY_IMPORTS))

# Triton kernels of the patches run on CPU through Triton's interpreter when there is no GPU. It
# must be on before any kernel module is imported (triton.jit reads it at decoration time).
try:
    import torch

    _has_gpu = torch.cuda.is_available()
except ImportError:
    _has_gpu = False
if not _has_gpu:
    os.environ.setdefault("TRITON_INTERPRET", "1")
