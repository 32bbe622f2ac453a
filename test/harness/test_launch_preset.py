"""scripts/launch_gemma4.sh, with a stand-in `python3` on PATH that records each call: the prebuild
runs before the server, for the served checkpoint and TP size; --no-prebuild and
SGLANG_GEMMA4_PREBUILD=0 skip it; a failed prebuild still starts the server; the MoE variant gets
sglang's fused MoE sum."""

import os
import subprocess
from pathlib import Path

from sglang_gemma4.gpu.profile import PRESET_FLAGS

LAUNCH = Path(__file__).resolve().parents[2] / "scripts" / "launch_gemma4.sh"


def launch(tmp_path: Path, *args: str, variant: str = "31b", prebuild_fails: bool = False, **env: str) -> list[str]:
    """The python3 command lines the preset ran, in order."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    calls.write_text("")
    fake = bin_dir / "python3"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                    + ('case "$*" in *sglang_gemma4.gpu.prebuild*) exit 1 ;; esac\n' if prebuild_fails else ""))
    fake.chmod(0o755)
    result = subprocess.run(["bash", str(LAUNCH), variant, "--model", str(tmp_path / "ckpt"), *args],
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **env},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return calls.read_text().splitlines()


def test_prebuild_runs_first_for_the_served_checkpoint_and_tp(tmp_path):
    prebuild, server = launch(tmp_path, "--tp", "2")
    assert prebuild == f"-m sglang_gemma4.gpu.prebuild --model {tmp_path / 'ckpt'} --tp 2"
    assert server.startswith("-m sglang.launch_server ") and "--tp-size 2" in server


def test_no_prebuild_by_flag_or_environment(tmp_path):
    assert [c.split()[1] for c in launch(tmp_path, "--no-prebuild")] == ["sglang.launch_server"]
    assert [c.split()[1] for c in launch(tmp_path, SGLANG_GEMMA4_PREBUILD="0")] == ["sglang.launch_server"]


def test_a_failed_prebuild_still_starts_the_server(tmp_path):
    calls = launch(tmp_path, prebuild_fails=True)
    assert [c.split()[1] for c in calls] == ["sglang_gemma4.gpu.prebuild", "sglang.launch_server"]


def test_fused_moe_sum_for_the_moe_variant_only_as_the_profiler_runs_it(tmp_path):
    for variant in ("e2b", "e4b", "26b-a4b", "31b"):
        server = launch(tmp_path, "--no-prebuild", variant=variant)[0].split()
        assert ("--enable-fused-moe-sum-all-reduce" in server) is (variant == "26b-a4b"), variant
        # the profiler passes the same sglang options, so that a profiled step is the served one
        assert [a for a in server if a.startswith("--enable-")] == PRESET_FLAGS.get(variant, []), variant
