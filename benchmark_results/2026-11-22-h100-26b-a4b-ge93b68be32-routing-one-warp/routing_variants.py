"""Exploration (session 5, call 3): forms of patch 0020's routing kernel timed side by side on the GPU.

    . /tmp/sglang-gemma4/env-patched.sh && python3 routing_variants.py   # from a clone of this repo

Each form is patch 0020's kernel as committed at one revision of this repo (read from the patch file
in git history); the number of warps is set at launch.  Prints, per token count, the median graph-replayed
time per call (min of 3) and the same after a 128 MiB memset that evicts L2 (memset time subtracted).
"""

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
from sglang_gemma4.cuda_timing import graph_replay_us  # noqa: E402

PATCH = "patches/0020-gemma4-fused-moe-routing.patch"
# name: (revision of this repo, warps)
VARIANTS = {"old4w": ("1943279", 4), "packed1w": ("714cae4", 1), "prefetch1w": ("4d0baae", 1),
            "old1w": ("1943279", 1), "packed4w": ("714cae4", 4)}


def kernel(revision: str):
    """The routing kernel added by the patch file at `revision`, imported from a temporary module."""
    patch = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:{PATCH}"], check=True,
                           capture_output=True, text=True).stdout
    added = "\n".join(line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
    start = added.index("@triton.jit\ndef _gemma4_routing_kernel(")
    source = "import triton\nimport triton.language as tl\n\n" + added[start:added.index("def fused_gemma4_routing_supported")]
    path = Path(tempfile.mkdtemp()) / f"routing_{revision}.py"  # triton.jit reads the source from a file
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._gemma4_routing_kernel


def main() -> None:
    experts, k = 128, 8
    kernels = {name: (kernel(rev), warps) for name, (rev, warps) in VARIANTS.items()}
    scale = (1 + 0.1 * torch.randn(experts, device="cuda")).float()
    flush = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    flush_us = min(graph_replay_us(flush.zero_, 20, 20) for _ in range(3))
    print("flush", flush_us)
    for tokens in (1, 8, 64, 512):
        logits = torch.randn(tokens, experts, device="cuda", dtype=torch.bfloat16)
        results, reference = {}, None
        for name, (kern, warps) in kernels.items():
            weights = torch.empty(tokens, k, device="cuda")
            ids = torch.empty(tokens, k, device="cuda", dtype=torch.int32)

            def launch():
                kern[(tokens,)](logits, scale, weights, ids, logits.stride(0), experts, TOPK=k, BLOCK_E=128,
                                BLOCK_K=8, num_warps=warps)

            launch()
            torch.cuda.synchronize()
            reference = reference or (weights.clone(), ids.clone())
            assert torch.equal(ids, reference[1]) and torch.allclose(weights, reference[0]), name
            results[name] = min(graph_replay_us(launch, 30, 100) for _ in range(3))
            results[name + "+flush"] = min(graph_replay_us(lambda: (flush.zero_(), launch()), 20, 20)
                                           for _ in range(3)) - flush_us
        print(tokens, " ".join(f"{name}={us:.2f}us" for name, us in results.items()), flush=True)


if __name__ == "__main__":
    main()
