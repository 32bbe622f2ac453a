"""config.json-only Gemma-4 checkpoints (no weights), and the ServerArgs a server would build from
them, for the server-args tests."""

import json
from pathlib import Path

from sglang_gemma4.gpu.variants import ARCHS, text_config


def write_config(directory: Path, variant: str, arch: str) -> Path:
    """Write config.json for `variant` served as `arch` ("causal" or "conditional")."""
    text = text_config(variant)
    if arch == "causal":
        config = {**text, "architectures": [ARCHS[arch]]}
    else:
        from transformers.models.gemma4.configuration_gemma4 import Gemma4Config

        config = Gemma4Config(text_config=text).to_dict()
        config["architectures"] = [ARCHS[arch]]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory


def server_args(model_dir: Path, *extra: str):
    """What `launch_server` builds from its argv (prepare_server_args, minus its logging set-up,
    which would detach pytest's log capture), on CPU from config.json alone."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    # the launch preset's attention backend: on a CPU device sglang would pick intel_amx, which
    # its Gemma 4 checks refuse
    argv = ["--model-path", str(model_dir), "--device", "cpu", "--attention-backend", "triton", *extra]
    return ServerArgs.from_cli_args(parser.parse_args(argv))
