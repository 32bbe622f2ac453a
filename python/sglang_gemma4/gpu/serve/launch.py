"""Serve a Gemma-4 variant with this stack's preset (presets.py); scripts/launch_gemma4.sh runs
this.

    python -m sglang_gemma4.gpu.serve.launch VARIANT [--model DIR] [--mtp] [--draft DIR] [--tp N]
        [--dp N] [--host H] [--port P] [--api-key K] [--admin-api-key K] [--no-structured-output]
        [--no-parsers] [--kv-fp8] [--multimodal] [--static-kv] [--no-prebuild] [--dry-run]
        [-- extra launch_server flags]

The Python environment decides which build serves: source $PREFIX/env-patched.sh or env-pristine.sh
(scripts/gpu/setup.sh) first, or have the patched wheel installed.  Extra flags after -- come last,
so they override the preset.  Before the server starts, the launcher prints who it lets in
(access.py): API and admin routes, CORS, the realtime websocket, client chat templates.
"""

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.gpu import REPO
from sglang_gemma4.gpu.serve import access
from sglang_gemma4.gpu.serve.presets import NOT_SERVED, PRESETS, server_args


def served_variant(name: str) -> str:
    """A variant name as given; one the presets know not to serve is refused with the reason."""
    if name.lower() in NOT_SERVED:
        raise argparse.ArgumentTypeError(NOT_SERVED[name.lower()])
    return name


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch_gemma4",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("variant", type=served_variant, choices=list(PRESETS))
    p.add_argument(
        "--model",
        help="checkpoint to serve (default: checkpoints/VARIANT, a config-only checkpoint "
        "made on first use and served with --load-format dummy: speed runs only)",
    )
    p.add_argument(
        "--mtp",
        action="store_true",
        help="speculative decoding with the Gemma-4 assistant draft "
        "(FROZEN_KV_MTP, 3 steps, 4 draft tokens, top-k 1; 26b-a4b and 31b)",
    )
    p.add_argument(
        "--draft",
        help="the Gemma4AssistantForCausalLM draft checkpoint (default with no --model: "
        "checkpoints/VARIANT-assistant, config-only, made on first use, dummy weights)",
    )
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    p.add_argument(
        "--dp",
        type=int,
        default=1,
        help="data parallel size: DP copies of the model (each on TP GPUs), requests spread "
        "among them by sglang's controller",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="bind address (default: not exposed unless asked)"
    )
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", help="passed through to launch_server")
    p.add_argument(
        "--admin-api-key",
        help="passed through to launch_server: opens the admin routes (weight "
        "updates, profiling, cache flushes, ...) to this key; without it they answer 403",
    )
    p.add_argument(
        "--no-prebuild",
        action="store_true",
        help="skip building sglang's and FlashInfer's CUDA modules side by side before the "
        "server starts "
        "(python -m sglang_gemma4.gpu.serve.prebuild); a server then compiles the ones "
        "missing from its "
        "caches one after another during its first graph capture "
        "(SGLANG_GEMMA4_PREBUILD=0 does the "
        "same)",
    )
    p.add_argument(
        "--no-structured-output",
        action="store_true",
        help="serve without a grammar backend: json_schema, regex and EBNF requests are refused",
    )
    p.add_argument(
        "--no-parsers",
        action="store_true",
        help="serve without the gemma4 tool-call and reasoning parsers: tool calls and "
        "thinking stay "
        "in the message content",
    )
    p.add_argument(
        "--kv-fp8",
        action="store_true",
        help="the KV cache in FP8 (--kv-cache-dtype fp8_e4m3): twice the tokens in the same "
        "memory, "
        "K and V rounded to e4m3",
    )
    p.add_argument(
        "--multimodal",
        action="store_true",
        help="load the vision (and on e2b/e4b audio) towers and accept image/audio input; "
        "without it "
        "Gemma-4 is served text-only and media is refused. Without --model: a config-only "
        "Gemma4ForConditionalGeneration checkpoint, checkpoints/VARIANT-multimodal",
    )
    p.add_argument(
        "--static-kv",
        action="store_true",
        help="26b-a4b: keep sglang's static split of the KV pool between full-attention and "
        "sliding-window layers instead of the preset's one buffer for both "
        "(--enable-unified-memory, which holds about 1.8x the full-attention tokens at the "
        "model's window); --mtp, --kv-fp8 and --tp above 1 always use the split",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the commands instead of running them"
    )
    return p


@dataclass(frozen=True)
class Launch:
    """The launcher's options (parser()'s), and the launch_server flags after --, which come last to
    override the preset. The harness's servers (server.py) build one directly."""

    variant: str
    model: str | None = None
    mtp: bool = False
    draft: str | None = None
    tp: int = 1
    dp: int = 1
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    admin_api_key: str | None = None
    no_prebuild: bool = False
    no_structured_output: bool = False
    no_parsers: bool = False
    kv_fp8: bool = False
    multimodal: bool = False
    static_kv: bool = False
    dry_run: bool = False
    extra: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The launcher's command line for these options: parse(launch.argv()) == launch."""
        defaults = Launch(self.variant)
        words = [self.variant, "--port", str(self.port)]
        for name in (
            "model",
            "mtp",
            "draft",
            "tp",
            "dp",
            "host",
            "api_key",
            "admin_api_key",
            "no_prebuild",
            "no_structured_output",
            "no_parsers",
            "kv_fp8",
            "multimodal",
            "static_kv",
            "dry_run",
        ):
            value, flag = getattr(self, name), "--" + name.replace("_", "-")
            if value != getattr(defaults, name):
                words += [flag] if isinstance(value, bool) else [flag, str(value)]
        return [*words, "--", *self.extra]


def parse(argv: list[str]) -> Launch:
    cut = argv.index("--") if "--" in argv else len(argv)
    return Launch(**vars(parser().parse_args(argv[:cut])), extra=tuple(argv[cut + 1 :]))


def config_only(variant: str, path: Path, arch: str, dry_run: bool) -> None:
    """A config-and-tokenizer checkpoint (served with dummy weights), made once."""
    if dry_run or (path / "config.json").is_file():
        return
    from sglang_gemma4.gpu.serve.checkpoint import write_checkpoint

    write_checkpoint(variant, path, arch=arch, weights="none", repo_root=REPO)


def commands(args: Launch) -> tuple[list[str] | None, list[str]]:
    """(the prebuild's command or None, the server's command)."""
    model, draft, dummy = args.model, args.draft, False
    if not model:
        name = f"{args.variant}-multimodal" if args.multimodal else args.variant
        model, dummy = str(REPO / "checkpoints" / name), True
        config_only(
            args.variant, Path(model), "conditional" if args.multimodal else "causal", args.dry_run
        )
        if args.mtp and not draft:
            draft = str(REPO / "checkpoints" / f"{args.variant}-assistant")
            config_only(args.variant, Path(draft), "assistant", args.dry_run)
    if args.mtp and not draft:
        raise SystemExit(
            (
                "launch_gemma4: --mtp with --model needs --draft DIR (a "
                "Gemma4AssistantForCausalLM checkpoint)"
            )
        )
    server = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        *server_args(
            args.variant,
            model,
            tp=args.tp,
            dp=args.dp,
            host=args.host,
            port=args.port,
            dummy_weights=dummy,
            draft=draft if args.mtp else None,
            api_key=args.api_key,
            admin_api_key=args.admin_api_key,
            structured_output=not args.no_structured_output,
            parsers=not args.no_parsers,
            kv_fp8=args.kv_fp8,
            multimodal=args.multimodal,
            static_kv=args.static_kv,
        ),
        *args.extra,
    ]
    prebuild = not args.no_prebuild and os.environ.get("SGLANG_GEMMA4_PREBUILD", "1") != "0"
    return (
        [
            sys.executable,
            "-m",
            "sglang_gemma4.gpu.serve.prebuild",
            "--model",
            model,
            "--tp",
            str(args.tp),
        ]
        if prebuild
        else None
    ), server


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    prebuild, server = commands(args)
    if args.dry_run:
        for command in filter(None, (prebuild, server)):
            print(shlex.join(command))
        return 0
    print(
        f"launch_gemma4: {os.environ.get('SGLANG_GEMMA4_BUILD', 'installed')} sglang, "
        f"{args.variant}, "
        f"tp {args.tp}, {args.host}:{args.port}",
        flush=True,
    )
    for line in access.summary(server[3:], dict(os.environ), access.installed_sglang()):
        print(f"launch_gemma4: {line}", flush=True)
    # Before, not beside, the server: the build processes are gone when it sizes its memory pools.
    if prebuild and subprocess.run(prebuild).returncode != 0:
        print(
            "launch_gemma4: prebuild incomplete; the server builds what is missing itself",
            file=sys.stderr,
            flush=True,
        )
    os.execv(server[0], server)


if __name__ == "__main__":
    raise SystemExit(main())
