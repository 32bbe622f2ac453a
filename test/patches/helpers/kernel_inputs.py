"""Shared by the kernel patches' tests: fresh random inputs on the test device, the float32 RMSNorm
reference, which shapes the Triton interpreter can afford on CPU, a spy on a kernel's launch
options, a stand-in attention layer for the Triton backend and its extend over a KV-shared layer."""

from types import SimpleNamespace

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INTERPRETED_MAX_TOKENS = 8  # the interpreter runs programs one by one in numpy


def gpu_marks(tokens: int) -> list:
    """Cases with more tokens than the interpreter can afford run on a GPU only."""
    return [pytest.mark.gpu] if tokens > INTERPRETED_MAX_TOKENS else []


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEVICE)


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def relative_difference(a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest difference of a from b, over the reference's largest value."""
    return ((a.float() - b.float()).abs().max() / ref.float().abs().max()).item()


class LaunchSpy:
    """Stands in for a Triton kernel's launcher: records the named launch options of each launch
    (e.g. the tile a Python wrapper picked), then runs the real kernel."""

    def __init__(self, kernel, options: tuple[str, ...]):
        self.kernel, self.options, self.launches = kernel, options, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(tuple(kwargs[k] for k in self.options))
            return self.kernel[grid](*args, **kwargs)

        return launch


def spy_on_hopper(monkeypatch, module, kernel_name: str, options: tuple[str, ...]) -> LaunchSpy:
    """Report the device as Hopper (sm_90) to `module` and spy on its kernel `kernel_name`."""
    monkeypatch.setattr(module, "_is_cuda", True)
    monkeypatch.setattr(module, "CUDA_CAPABILITY", (9, 0), raising=False)
    spy = LaunchSpy(getattr(module, kernel_name), options)
    monkeypatch.setattr(module, kernel_name, spy)
    return spy


# What TritonAttnBackend.forward_extend reads of the backend besides its pool, metadata and kernels:
# every optional path off, page size 1 (newer releases: the 0.5.18 gfx95 verify kernel, dense FP8
# chunked prefill, bidirectional extend, diffusion LM attention)
EXTEND_BACKEND_SWITCHES = dict(
    dcp_size=1,
    enable_deterministic=False,
    page_size=1,
    use_verify_splitkv=False,
    use_grouped_verify=False,
    use_verify_shared_kv=False,
    use_dense_fp8_chunked_prefill=False,
    allow_bidirectional_attention_in_extend=False,
    dllm_attention=None,
)


def extend_forward_batch(**fields) -> SimpleNamespace:
    """What forward_extend reads of a ForwardBatch, with `fields` (newer releases: the MLA one-shot
    fields)."""
    return SimpleNamespace(
        **{
            "extend_seq_lens_cpu": None,
            "mha_one_shot": False,
            "attn_attend_prefix_cache": False,
            **fields,
        }
    )


def attention_layer(heads: int, dim: int, window: int = -1, **changes) -> SimpleNamespace:
    """What TritonAttnBackend reads of a RadixAttention layer: `heads` query heads of width `dim`,
    causal decoder attention, a sliding window of `window` tokens (-1: none), no KV scales."""
    from sglang.srt.layers.radix_attention import AttentionType

    fields = dict(
        tp_q_head_num=heads,
        qk_head_dim=dim,
        v_head_dim=dim,
        layer_id=0,
        sliding_window_size=window,
        k_scale=None,
        v_scale=None,
        logit_cap=0.0,
        logit_capping_method="tanh",
        scaling=dim**-0.5,
        xai_temperature_len=-1,
        is_cross_attention=False,
        attn_type=AttentionType.DECODER,
    )
    return SimpleNamespace(**{**fields, **changes})


def kv_shared_layer_extend(k_cache, v_cache, chunk, layer, q) -> dict:
    """TritonAttnBackend.forward_extend for a KV-shared layer (E2B/E4B's last layers store no K/V:
    their extend reads this chunk's rows, the slots `chunk`, back from the cache) over the buffers
    `k_cache`/`v_cache`; the K and V the extend kernel was handed."""
    from sglang.srt.layers.attention import triton_backend as tb

    seen = {}
    backend = SimpleNamespace(
        token_to_kv_pool=SimpleNamespace(
            get_kv_buffer=lambda layer_id: (k_cache, v_cache),
            get_key_buffer=lambda layer_id: k_cache,
            get_value_buffer=lambda layer_id: v_cache,
        ),
        _translate_kv_loc=None,
        **EXTEND_BACKEND_SWITCHES,
        forward_metadata=SimpleNamespace(
            **dict.fromkeys(
                ["kv_indptr", "kv_indices", "qo_indptr", "custom_mask", "mask_indptr"], None
            ),
            max_extend_len=len(chunk),
        ),
        _grouped_verify_applies=lambda *args: False,
        _gemm_extend_plan=lambda *args, **kwargs: None,  # 0185's GEMM path
        extend_attention_fwd=lambda q, k, v, *rest, **kw: seen.update(k=k, v=v),
        # newer releases: the extend kernel behind a method
        _forward_extend_kernel=lambda layer, q, k, v, *rest, **kw: seen.update(k=k, v=v),
    )
    # newer releases: the forward mode's diffusion check
    batch = extend_forward_batch(
        out_cache_loc=chunk,
        _attn_output=None,
        forward_mode=SimpleNamespace(is_dllm_extend=lambda: False, is_target_verify=lambda: False),
    )
    tb.TritonAttnBackend.forward_extend(backend, q, None, None, layer, batch, save_kv_cache=False)
    return seen
