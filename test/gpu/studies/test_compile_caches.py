"""gpu/studies/compile_caches: the builds of a server start counted per cache and kernel or module,
from Triton's group files and the JIT caches' shared libraries, with write times relative to the
first."""

import os

from sglang_gemma4.gpu.studies.compile_caches import builds, summary


def written_at(path, when: float):
    os.utime(path, (when, when))


def triton_entry(root, key: str, kernel: str, when: float, cache: str = "triton"):
    folder = root / cache / key
    folder.mkdir(parents=True)
    group = folder / f"__grp__{kernel}.json"
    group.write_text("{}")
    (folder / f"{kernel}.cubin").write_bytes(b"")  # compiled artefacts beside it are not counted
    written_at(group, when)


def library(root, relative: str, when: float):
    so = root / relative
    so.parent.mkdir(parents=True, exist_ok=True)
    so.write_bytes(b"")
    (so.parent / "main.o").write_bytes(b"")  # build intermediates are not counted
    written_at(so, when)


def test_counts_builds_per_cache_and_kernel_in_write_order(tmp_path):
    triton_entry(tmp_path, "a1", "fused_moe_kernel", 1000.0)
    triton_entry(tmp_path, "a2", "_fwd_grouped_kernel_stage1", 1003.5)
    triton_entry(tmp_path, "a3", "fused_moe_kernel", 1042.0)
    library(
        tmp_path,
        "tvm-ffi/sgl_kernel_jit_fused_rope_true_256_true_bf16_t_7064/"
        "sgl_kernel_jit_fused_rope_true_256_true_bf16_t.so",
        1001.0,
    )
    library(tmp_path, "flashinfer/.cache/flashinfer/0.6.11/90a/cached_ops/norm/norm.so", 1020.0)
    triton_entry(
        tmp_path, "triton/b7", "triton_per_fused_copy__mul_sum_0", 1030.0, cache="inductor"
    )
    (tmp_path / "unrelated.txt").write_text("")
    records = builds(tmp_path)
    assert [(r["cache"], r["kernel"]) for r in records] == [
        ("triton", "fused_moe_kernel"),
        ("tvm-ffi", "sgl_kernel_jit_fused_rope_true_256_true_bf16_t"),
        ("triton", "_fwd_grouped_kernel_stage1"),
        ("flashinfer", "norm"),
        ("inductor", "triton_per_fused_copy__mul_sum_0"),
        ("triton", "fused_moe_kernel"),
    ]
    assert summary(records) == [
        {
            "cache": "triton",
            "kernel": "fused_moe_kernel",
            "builds": 2,
            "first_s": 0.0,
            "last_s": 42.0,
        },
        {
            "cache": "tvm-ffi",
            "kernel": "sgl_kernel_jit_fused_rope_true_256_true_bf16_t",
            "builds": 1,
            "first_s": 1.0,
            "last_s": 1.0,
        },
        {
            "cache": "triton",
            "kernel": "_fwd_grouped_kernel_stage1",
            "builds": 1,
            "first_s": 3.5,
            "last_s": 3.5,
        },
        {"cache": "flashinfer", "kernel": "norm", "builds": 1, "first_s": 20.0, "last_s": 20.0},
        {
            "cache": "inductor",
            "kernel": "triton_per_fused_copy__mul_sum_0",
            "builds": 1,
            "first_s": 30.0,
            "last_s": 30.0,
        },
    ]


def test_empty_or_missing_caches(tmp_path):
    assert builds(tmp_path) == [] and summary([]) == []
