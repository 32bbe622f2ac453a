"""The ServerArgs a server would build from a config.json-only Gemma-4 checkpoint
(sglang_gemma4.gpu.serve.variants.write_config), for the server-args tests."""

import json
from functools import cache
from pathlib import Path

from sglang_gemma4.gpu.serve import variants
from sglang_gemma4.gpu.serve.presets import resolved_server_args


@cache
def per_layer_text_config() -> bool:
    """Whether transformers states Gemma-4's text config per layer (5.19+): its full-attention
    layers' head_dim and KV heads then raise on a read of the global value."""
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig

    return getattr(Gemma4TextConfig(), "is_heterogeneous", False)


def write_config(directory: Path, variant: str, arch: str) -> Path:
    """variants.write_config; where transformers states the text config per layer, a "causal"
    checkpoint is written as the published ones are (model_type gemma4, the text config nested)
    with Gemma4ForCausalLM as its architecture: sglang flattens the per-layer shapes of a nested
    text config only, and reading a flat gemma4_text config.json raises in its get_config."""
    variants.write_config(directory, variant, arch)
    if arch == "causal" and per_layer_text_config():
        from transformers.models.gemma4.configuration_gemma4 import Gemma4Config

        config = Gemma4Config(text_config=variants.text_config(variant)).to_dict()
        config["architectures"] = [variants.ARCHS[arch]]
        (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory


def server_args(model_dir: Path, *extra: str, **fields):
    """What `launch_server` builds from its argv (prepare_server_args, minus its logging set-up,
    which would detach pytest's log capture), on CPU from config.json alone.  `fields`: values no
    flag can give (a --config file's), set before sglang 0.5.23+ resolves the record."""
    # the launch preset's attention backend: on a CPU device sglang would pick intel_amx, which
    # its Gemma 4 checks refuse
    args = resolved_server_args(
        ["--model-path", str(model_dir), "--device", "cpu", "--attention-backend", "triton", *extra]
    )
    if hasattr(args, "resolve_once"):  # sglang 0.5.23+ resolves the record apart from building it
        for name, value in fields.items():
            setattr(args, name, value)
        args.resolve_once()
    elif fields:
        raise TypeError(f"fields {sorted(fields)} need sglang 0.5.23+")
    return args
