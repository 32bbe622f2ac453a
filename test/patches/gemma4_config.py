"""The ServerArgs a server would build from a config.json-only Gemma-4 checkpoint
(sglang_gemma4.gpu.variants.write_config), for the server-args tests."""

from pathlib import Path


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
