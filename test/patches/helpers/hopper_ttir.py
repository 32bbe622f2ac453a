"""A Triton kernel's launch lowered to Triton IR for an H100 (sm_90) on a machine without a GPU: the
front end that turns the kernel's Python into IR, where tl.dot checks its operands' types, runs on
CPU
(the interpreter the kernel tests use never compiles). Built from Triton's own argument binder, as
JITFunction.run does before it compiles (Triton 3.7)."""

from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

HOPPER = GPUTarget("cuda", 90, 32)


def hopper_ttir(kernel, *args, **kwargs) -> str:
    """The Triton IR of launching `kernel` (a @triton.jit function, interpreted or not) with these
    arguments on sm_90; raises triton.compiler.errors.CompilationError where compiling it would."""
    fn = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)
    backend = make_backend(HOPPER)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    launch = {k: v for k, v in kwargs.items() if k not in ("num_warps", "num_stages")}
    bound, specialization, _ = binder(*args, **launch)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, kwargs, bound, specialization, None
    )
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = ASTSource(fn, signature, constexprs, attrs).make_ir(
        HOPPER,
        options,
        backend.get_codegen_implementation(options),
        backend.get_module_map(),
        context,
    )
    return str(module)


class CompileSpy:
    """Stands in for a kernel's launcher: records the sm_90 Triton IR of each launch instead of
    running it."""

    def __init__(self, kernel):
        self.kernel, self.ir = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.ir.append(hopper_ttir(self.kernel, *args, **kwargs))

        return launch


def _dots(module: str) -> list[str]:
    """Each tt.dot's operand and result types, e.g. 'tensor<16x512xbf16> * tensor<512x32xbf16> ->
    ...'."""
    return [
        line.split(" : ", 1)[1].split(" loc(")[0]
        for line in module.splitlines()
        if "tt.dot" in line
    ]


def _cases():
    """The Triton attention kernels Gemma-4's full layers (head dim 512, 2 KV heads, 16 query heads)
    launch
    on a K/V cache in each dtype, and the unified hybrid-SWA pool's FP8 cache as the grouped decode
    kernel gets it; each case yields the sm_90 Triton IR of its launches."""
    import torch

    from sglang.kernels.ops.attention import decode_attention as da
    from sglang.kernels.ops.attention import extend_attention as ea
    from sglang.kernels.ops.attention import verify_grouped_attention as vg

    def spy(module, *names):
        spies = [CompileSpy(getattr(module, n)) for n in names]
        for name, s in zip(names, spies):
            setattr(module, name, s)
        return spies

    (decode,) = spy(da, "_fwd_grouped_kernel_stage1")
    ea._is_cuda, ea.CUDA_CAPABILITY = True, (9, 0)  # Hopper's tiles and 0105's packed kernel
    extend, packed = spy(ea, "_fwd_kernel", "_fwd_kernel_gqa_packed")
    verify, _ = spy(vg, "_verify_grouped_split", "_verify_grouped_merge")
    q = torch.zeros(4, 16, 512, dtype=torch.bfloat16)
    new_kv = torch.zeros(4, 2, 512, dtype=torch.bfloat16)
    qo_indptr, kv_indptr = (
        torch.tensor([0, 4], dtype=torch.int32),
        torch.tensor([0, 10], dtype=torch.int32),
    )

    def kernels(k, v):
        out = {}
        da._decode_grouped_att_m_fwd(
            q[:1],
            k,
            v,
            torch.empty(1, 16, 4, 512),
            torch.empty(1, 16, 4),
            kv_indptr,
            torch.arange(10),
            torch.tensor([4], dtype=torch.int32),
            4,
            0.1,
            0.0,
        )
        out["decode"] = decode.ir.pop()
        for name, spied, pack in (("extend", extend, "0"), ("extend-gqa-packed", packed, "1")):
            import os

            os.environ["SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK"] = pack
            ea.extend_attention_fwd(
                q,
                new_kv,
                new_kv,
                torch.empty_like(q),
                k,
                v,
                qo_indptr,
                kv_indptr,
                torch.arange(10),
                None,
                True,
                None,
                4,
                1.0,
                1.0,
                0.1,
            )
            out[name] = spied.ir.pop()
        vg.verify_grouped_attention_fwd(
            q,
            new_kv,
            new_kv,
            torch.empty_like(q),
            k,
            v,
            qo_indptr,
            kv_indptr,
            torch.arange(10),
            4,
            0.1,
            sm_count=132,
        )
        out["verify"] = verify.ir.pop()
        return out

    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        cache = torch.zeros(10, 2, 512, dtype=dtype)
        yield str(dtype).removeprefix("torch."), lambda cache=cache: kernels(cache, cache)

    def unified_pool_decode():
        from sglang.srt.mem_cache.unified_memory_pool import init_unified_swa_pools

        bundle = init_unified_swa_pools(
            device="cpu",
            kv_cache_dtype=torch.float8_e4m3fn,
            head_num=2,
            head_dim=512,
            v_head_dim=512,
            swa_head_num=8,
            swa_head_dim=256,
            swa_v_head_dim=256,
            page_size=1,
            start_layer=0,
            end_layer=6,
            swa_attention_layer_ids=[0, 1, 2, 3, 4],
            full_attention_layer_ids=[5],
            full_max_total_num_tokens=64,
            swa_max_total_num_tokens=64,
            enable_memory_saver=False,
            need_sort=False,
        )
        k, v = bundle.token_to_kv_pool.get_kv_buffer(5)
        if k.dim() == 4:  # 0.5.17's page-major views (pages, 1, heads, dim); later: 3-D
            k, v = k[:, 0], v[:, 0]
        da._decode_grouped_att_m_fwd(
            q[:1],
            k,
            v,
            torch.empty(1, 16, 4, 512),
            torch.empty(1, 16, 4),
            kv_indptr,
            torch.arange(10),
            torch.tensor([4], dtype=torch.int32),
            4,
            0.1,
            0.0,
        )
        return {"decode": decode.ir.pop()}

    yield "unified-pool-fp8", unified_pool_decode


def main() -> None:
    """Print, as JSON, each case's kernels' tt.dot types or the error compiling them raised."""
    import json

    from triton.compiler.errors import CompilationError

    result = {}
    for case, run in _cases():
        try:
            result[case] = {name: _dots(module) for name, module in run().items()}
        except CompilationError as e:
            result[case] = {"error": str(e).strip().splitlines()[-1]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
