"""The ServerArgs a server would build from a config.json-only Gemma-4 checkpoint
(sglang_gemma4.gpu.variants.write_config), for the server-args tests."""

from pathlib import Path

from sglang_gemma4.gpu.presets import resolved_server_args


def server_args(model_dir: Path, *extra: str):
    """What `launch_server` builds from its argv (prepare_server_args, minus its logging set-up,
    which would detach pytest's log capture), on CPU from config.json alone."""
    # the launch preset's attention backend: on a CPU device sglang would pick intel_amx, which
    # its Gemma 4 checks refuse
    return resolved_server_args(["--model-path", str(model_dir), "--device", "cpu", "--attention-backend", "triton",
                                 *extra])
