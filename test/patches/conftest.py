# Importing patched_tree (test/patched_tree.py) puts the patched sglang first on sys.path before any test imports it.
import patched_tree  # noqa: F401
import pytest


@pytest.fixture
def one_process_group():
    """Tensor parallelism of one, as a single-GPU server sets it up."""
    from sglang.srt.distributed import parallel_state

    parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                                distributed_init_method="tcp://127.0.0.1:29517")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
    yield
    parallel_state.destroy_model_parallel()
    parallel_state.destroy_distributed_environment()
