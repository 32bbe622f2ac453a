"""harness/triton_cache: compiles counted per kernel from a Triton cache's group files, with write
times relative to the first compile."""

import os

from sglang_gemma4.harness.triton_cache import compiles, summary


def entry(cache, key: str, kernel: str, written: float):
    folder = cache / key
    folder.mkdir()
    group = folder / f"__grp__{kernel}.json"
    group.write_text("{}")
    (folder / f"{kernel}.cubin").write_bytes(b"")  # compiled artefacts beside it are not counted
    os.utime(group, (written, written))


def test_counts_compiles_per_kernel(tmp_path):
    entry(tmp_path, "a1", "fused_moe_kernel", 1000.0)
    entry(tmp_path, "a2", "_fwd_grouped_kernel_stage1", 1003.5)
    entry(tmp_path, "a3", "fused_moe_kernel", 1010.0)
    entry(tmp_path, "a4", "fused_moe_kernel", 1042.0)
    (tmp_path / "unrelated.txt").write_text("")
    records = compiles(tmp_path)
    assert [r["kernel"] for r in records] == ["fused_moe_kernel", "_fwd_grouped_kernel_stage1",
                                             "fused_moe_kernel", "fused_moe_kernel"]
    assert summary(records) == [
        {"kernel": "fused_moe_kernel", "compiles": 3, "first_s": 0.0, "last_s": 42.0},
        {"kernel": "_fwd_grouped_kernel_stage1", "compiles": 1, "first_s": 3.5, "last_s": 3.5},
    ]


def test_empty_cache(tmp_path):
    assert compiles(tmp_path) == [] and summary([]) == []
