"""crash_repro/frozen-kv-mtp-swa-pages: in the pinned sglang, the frozen-KV MTP draft's trtllm_mha
backend takes its SWA state from the target's allocator, so it agrees with the SWA pool the draft
forward swaps in (the stale state issue #6 describes is absent).  Runs the repro script on CPU
against the work tree."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "crash_repro" / "frozen-kv-mtp-swa-pages" / "draft_backend_swa_state.py"
TREE = Path(os.environ.get("SGLANG_GEMMA4_TREE", REPO / "work" / "sglang"))


def test_draft_backend_sees_the_target_swa_pool():
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--tree", str(TREE)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == {
        "swapped_pool_is_target_swa_pool": True,
        "backend_use_sliding_window_kv_pool": True,
        "backend_swa_pool_is_swapped_pool": True,
        "draft_own_pool_is_swa": False,
        "agrees": True,
    }
