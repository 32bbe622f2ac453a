"""Test environment only (test/env/build.sh loads it through a .pth file): torchvision on a CPU
torch.

torchvision's Linux wheels on PyPI are built against CUDA torch, so on the test environment's CPU
torch its compiled ops (nms, roi_align, image decoding) do not load. torchvision allows that: an op
then raises when called. Except that its import registers fake kernels for two of them, nms and
qnms, whether they loaded or not, and fails. Just before torchvision is first looked up, this
declares those two ops, so that it imports; transformers' image processors and sglang's
module-level `from torchvision.io import decode_jpeg` then run on torchvision's own code. Where
torchvision's ops do load (a CUDA torch, a CPU build of torchvision), it declares nothing."""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"  # nms and qnms alike


def declare_missing_ops() -> None:
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return
    import torch

    if torch.version.cuda or torch.version.hip:
        return
    try:
        for library in Path(spec.origin).parent.glob("_C*.so"):
            torch.ops.load_library(library)  # declares every torchvision op where it loads
            return
    except OSError:
        pass
    for op in ("nms", "qnms"):
        torch.library.define(f"torchvision::{op}", SCHEMA)


class DeclareBeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs declare_missing_ops at the first lookup of torchvision (import or find_spec), then steps
    aside."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            sys.meta_path.remove(self)
            declare_missing_ops()
        return None


sys.meta_path.insert(0, DeclareBeforeTorchvision())
