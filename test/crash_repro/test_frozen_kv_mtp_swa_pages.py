"""crash_repro/frozen-kv-mtp-swa-pages: in the pinned sglang, the frozen-KV MTP draft's trtllm_mha
backend takes its SWA state from the target's allocator, so it agrees with the SWA pool the draft
forward swaps in (the stale state issue #6 describes is absent).  Runs the repro script on CPU
against the work tree, in this process (whose sglang is already imported from that tree)."""

import importlib.util
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "crash_repro" / "frozen-kv-mtp-swa-pages" / "draft_backend_swa_state.py"
TREE = Path(os.environ.get("SGLANG_GEMMA4_TREE", REPO / "work" / "sglang"))


def test_draft_backend_sees_the_target_swa_pool(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("draft_backend_swa_state", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--tree", str(TREE)])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the tree first
    assert script.main() == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result == {
        "swapped_pool_is_target_swa_pool": True,
        "backend_use_sliding_window_kv_pool": True,
        "backend_swa_pool_is_swapped_pool": True,
        "draft_own_pool_is_swa": False,
        "agrees": True,
    }
