"""The cold-start prebuild: which CUDA modules it builds for a Gemma-4 config, and that it builds
them side by side, reporting a failed one without stopping. The expected module arguments are the
builds a cold 26B-A4B server start left in its caches on an H100
(benchmark_results/sglang-0.5.12/2026-11-22-h100-26b-a4b-g5723c55349-coldstart/raw.tar.xz:compiles-26b-a4b.md):
sgl_kernel_jit_fused_rope_true_{256,512}_true_bf16_t, sgl_kernel_jit_kvcache_{4096,2048}_true,
activation bf16, resolve_future_token_ids and clamp_position int64, FlashInfer's norm."""

import json
import sys
import textwrap
import time
import types

import pytest
import torch

from sglang_gemma4.gpu.serve import prebuild
from sglang_gemma4.gpu.serve.checkpoint import write_checkpoint
from sglang_gemma4.gpu.serve.variants import text_config

SEEN_IN_THE_26B_A4B_COLD_START = {  # sglang 0.5.17's JIT modules for the 26B-A4B shape
    (
        "sglang.kernels.ops.attention.rope",
        "_jit_fused_rope_module",
        (True, 256, torch.bfloat16, torch.bfloat16),
    ),
    (
        "sglang.kernels.ops.attention.rope",
        "_jit_fused_rope_module",
        (True, 512, torch.bfloat16, torch.bfloat16),
    ),
    ("sglang.kernels.ops.kvcache.kvcache", "_jit_kvcache_module", (4096, 4096)),
    ("sglang.kernels.ops.kvcache.kvcache", "_jit_kvcache_module", (2048, 2048)),
    ("sglang.kernels.ops.activation.activation", "activation_module", (torch.bfloat16,)),
    ("sglang.kernels.ops.attention.clamp_position", "_jit_clamp_position_module", (torch.int64,)),
    (
        "sglang_gemma4.gpu.serve.prebuild",
        "flashinfer_cuda_norm",
        (),
    ),  # FlashInfer's norm, where sgl_kernel runs it
}


def kv_rows(config: dict, tp: int) -> list[int]:
    return sorted(
        args[0] for module, _, args in prebuild.builds(config, tp) if module.endswith("kvcache")
    )


def test_the_26b_a4b_builds_are_those_its_cold_start_made():
    assert set(prebuild.builds(text_config("26b-a4b"))) == SEEN_IN_THE_26B_A4B_COLD_START
    assert len(prebuild.builds(text_config("26b-a4b"))) == len(SEEN_IN_THE_26B_A4B_COLD_START)


def test_kv_rows_follow_heads_per_rank():
    # 31B: 16 sliding KV heads of 256, 4 full KV heads of 512 (bf16)
    assert kv_rows(text_config("31b"), tp=1) == sorted([16 * 256 * 2, 4 * 512 * 2])
    assert kv_rows(text_config("31b"), tp=2) == sorted([8 * 256 * 2, 2 * 512 * 2])
    # E2B: one KV head, shared by full layers too (no separate count): replicated, not split, at TP
    # 2
    assert kv_rows(text_config("e2b"), tp=2) == [1 * 256 * 2, 1 * 512 * 2]


@pytest.mark.parametrize("variant", ["26b-a4b", "31b", "e4b"])
def test_the_launch_presets_text_only_checkpoint_gives_the_same_builds(tmp_path, variant):
    # what the preset serves: sglang's text-only form, whose head_dim is the full layers' (session
    # 9's cold start built only the 512-wide RoPE and 2048-byte KV row from it, before this was read
    # right)
    write_checkpoint(variant, tmp_path)
    assert set(prebuild.builds(prebuild.text_config_of(tmp_path), tp=2)) == set(
        prebuild.builds(text_config(variant), tp=2)
    )
    assert len(prebuild.builds(prebuild.text_config_of(tmp_path))) == 7


def test_the_model_config_is_read_from_a_conditional_checkpoint_too(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {"architectures": ["Gemma4ForConditionalGeneration"], "text_config": text_config("e4b")}
        )
    )
    assert prebuild.text_config_of(tmp_path) == text_config("e4b")


STANDINS = """
    import time
    from pathlib import Path

    def build(marker, seconds):
        time.sleep(seconds)
        Path(marker).write_text("built")

    def broken():
        raise RuntimeError("nvcc exited with 1")
"""


def test_builds_run_side_by_side_and_a_failure_is_reported(tmp_path, monkeypatch):
    (tmp_path / "standin_builds.py").write_text(textwrap.dedent(STANDINS))
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned workers import with the parent's path
    markers = [tmp_path / f"built-{n}" for n in range(3)]
    jobs = [("standin_builds", "build", (str(m), 2.0)) for m in markers] + [
        ("standin_builds", "broken", ())
    ]
    lines = []
    start = time.monotonic()
    failed = prebuild.prebuild(jobs, log=lines.append)
    took = time.monotonic() - start

    assert all(m.read_text() == "built" for m in markers)
    assert failed == ["broken()"]
    assert "prebuild: broken() FAILED: RuntimeError: nvcc exited with 1" in lines
    assert lines[-1].startswith("prebuild: 3 of 4 modules ready")
    assert took < 3 * 2.0, f"three 2 s builds took {took:.1f} s: not side by side"


def test_cli_exit_status_says_whether_all_were_built(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(tmp_path / "tvm-ffi"))
    (tmp_path / "config.json").write_text(json.dumps(text_config("e2b")))
    monkeypatch.setattr(prebuild, "prebuild", lambda jobs: ["rope(True, 256, bfloat16)"])
    assert prebuild.main(["--model", str(tmp_path), "--tp", "2"]) == 1
    monkeypatch.setattr(prebuild, "prebuild", lambda jobs: [])
    assert prebuild.main(["--model", str(tmp_path)]) == 0


def test_a_complete_prebuild_is_not_redone_until_its_cache_is_emptied(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(tmp_path / "tvm-ffi"))
    (tmp_path / "config.json").write_text(json.dumps(text_config("26b-a4b")))
    runs = []
    outcome = [["kvcache(4096)"]]  # the first run fails one build: no stamp
    monkeypatch.setattr(prebuild, "prebuild", lambda jobs: runs.append(len(jobs)) or outcome[0])
    model = ["--model", str(tmp_path)]
    assert prebuild.main(model) == 1 and not list(
        (tmp_path / "tvm-ffi").glob("sglang-gemma4-prebuild-*")
    )
    outcome[0] = []
    assert prebuild.main(model) == 0 and prebuild.main(model) == 0
    assert runs == [7, 7], "the third run should have found the stamp"
    assert "built before" in capsys.readouterr().out
    assert prebuild.main([*model, "--force"]) == 0 and prebuild.main([*model, "--tp", "2"]) == 0
    assert runs == [7, 7, 7, 7], "--force and other builds (TP 2 rows) run again"
    for stamp in (tmp_path / "tvm-ffi").glob("sglang-gemma4-prebuild-*"):
        stamp.unlink()
    assert prebuild.main(model) == 0 and runs == [7, 7, 7, 7, 7]


def test_flashinfer_norm_is_built_only_where_sgl_kernel_would_run_it(monkeypatch):
    for cute_kernels_present in (False, True):
        built = []
        norm = types.SimpleNamespace(
            _USE_CUDA_NORM=not cute_kernels_present,
            get_norm_module=lambda built=built: built.append(1),
        )
        monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(norm=norm))
        monkeypatch.setitem(sys.modules, "flashinfer.norm", norm)
        prebuild.flashinfer_cuda_norm()
        assert built == ([] if cute_kernels_present else [1])
