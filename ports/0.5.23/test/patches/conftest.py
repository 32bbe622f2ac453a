"""A port's adapted tests run with the repository's test helpers and fixtures: test/ and
test/patches/ on sys.path, the patched tree first (patched_tree), the GPU skip of test/conftest.py
and the fixtures of test/patches/conftest.py, one_process_group as 0.5.23 builds its groups."""

import importlib.util
import sys
from pathlib import Path

from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[4]
for helpers in (REPO / "test", REPO / "test" / "patches"):
    if str(helpers) not in sys.path:
        sys.path.insert(0, str(helpers))

import patched_tree  # noqa: E402,F401


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_root = _load("sglang_gemma4_test_conftest", REPO / "test" / "conftest.py")
_patches = _load("sglang_gemma4_patches_conftest", REPO / "test" / "patches" / "conftest.py")
pytest_collection_modifyitems = _root.pytest_collection_modifyitems
globals().update({name: value for name, value in vars(_patches).items()
                  if type(value).__name__ == "FixtureFunctionDefinition"})


@pytest.fixture
def one_process_group():
    """Tensor parallelism of one, as a single-GPU server sets it up: 0.5.23 builds the groups at the
    widths of the published parallel config, stated here instead of a server's."""
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import get_parallel

    sizes = ("tp_size", "pp_size", "ep_size", "attn_cp_size", "attn_dp_size", "dp_size", "moe_dp_size", "dcp_size",
             "nnodes", "moe_ep_size", "moe_tp_size", "attn_tp_size", "attn_dcp_size", "max_world_size",
             "launch_world_size", "num_dp_ranks")
    ranks = ("node_rank", "launch_world_rank", "tp_rank", "pp_rank", "attn_tp_rank", "attn_dp_rank", "attn_cp_rank",
             "moe_ep_rank", "moe_tp_rank", "moe_dp_rank", "attn_dcp_rank", "dp_rank")
    get_parallel().override_permanently(**dict.fromkeys(sizes, 1), **dict.fromkeys(ranks, 0), shared_experts_tp_size=None,
                                        enable_dp_attention=False, attn_dp_enabled=False, dcp_enabled=False)
    parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                                distributed_init_method="tcp://127.0.0.1:29517")
    parallel_state.initialize_model_parallel()
    yield
    parallel_state.destroy_model_parallel()
    parallel_state.destroy_distributed_environment()
    get_parallel().clear_stamp()



@pytest.fixture
def decode_step(monkeypatch):
    """test/patches/conftest.py's decode_step as 0.5.23 runs the step: its decode loop first commits
    the step's beam groups (none here) and reads each request's beam group, retraction and
    sampling-mask request, all unset on the DecodingReqs."""
    from dataclasses import fields

    from sglang.srt.managers.scheduler_components import batch_result_processor as brp
    from sglang.srt.managers.utils import GenerationBatchResult

    cls = brp.SchedulerBatchResultProcessor
    monkeypatch.setattr(brp, "get_observability", lambda: SimpleNamespace(enable_metrics=False))
    monkeypatch.setattr(cls, "_maybe_update_reasoning_tokens", lambda self, req, tok: None)
    monkeypatch.setattr(cls, "_handle_finish_state_updated_req", lambda self, *a: None)

    def run(reqs, logits_output, next_token_ids):
        for req in reqs:
            req.beam_group, req.is_retracted, req.return_sampling_mask = None, False, False
        parts = {f.name: None for f in fields(cls)}
        parts.update(
            enable_overlap=False, enable_overlap_mlx=False, output_streamer=_patches.Streamer(),
            metrics_reporter=SimpleNamespace(num_generated_tokens=0, forward_ct_decode=0,
                                             report_decode_stats=lambda *a, **k: None),
            token_to_kv_pool_allocator=SimpleNamespace(free_group_begin=lambda: None,
                                                       free_group_end=lambda: None),
            beam_coordinator=SimpleNamespace(commit_decode=lambda batch: set()))
        processor = cls(**parts)
        batch = SimpleNamespace(reqs=reqs, spec_algorithm=SimpleNamespace(is_none=lambda: True),
                                return_logprob=False, batch_size=lambda: len(reqs))
        processor.process_batch_result_decode(
            batch, GenerationBatchResult(logits_output=logits_output, next_token_ids=next_token_ids))
        return processor

    return run
