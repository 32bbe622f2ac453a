"""Weight memory and KV pool size of a full-size checkpoint, per build (issue #4 parts 2 and 3).

    python -m sglang_gemma4.gpu.studies.memory --out DIR [--variants 31b e4b]
        [--archs conditional causal]
        [--builds pristine patched] [--memory explicit auto]

Each case loads the variant's config-only checkpoint (full size, dummy weights) in
`sglang.bench_one_batch` — the model runner alone, so a multimodal class needs no processor files —
runs one tiny batch eagerly and reads from its log what the runner reserved: the weights' GPU memory
("Load weight end ... mem usage"), the KV pool (`max_total_num_tokens`, and the full/SWA split), and
the chunked prefill size and mem_fraction_static the server arguments settled on.  `--memory
explicit` passes --mem-fraction-static 0.85 (isolates what the model builds); `auto` leaves the
memory settings to sglang (shows the dense defaults of patch 0011).  Writes DIR/memory.jsonl and
DIR/memory.md.
"""

import argparse
import json
import re
import subprocess
from pathlib import Path

from sglang_gemma4.gpu import REPO
from sglang_gemma4.gpu.serve import pool_usage
from sglang_gemma4.gpu.serve.checkpoint import write_checkpoint
from sglang_gemma4.gpu.serve.presets import BACKENDS, NO_GRAPHS
from sglang_gemma4.gpu.serve.server import describe, in_build

EXPLICIT_FRACTION = "0.85"
# bench_one_batch does not log its server arguments: print the two memory settings they settle on.
SETTLED = (
    "import argparse, sys; from sglang.srt.server_args import ServerArgs; p = "
    "argparse.ArgumentParser(); "
    "ServerArgs.add_cli_args(p); a = "
    "ServerArgs.from_cli_args(p.parse_known_args(sys.argv[1:])[0]); "
    'print(f"settled: chunked_prefill_size={a.chunked_prefill_size} '
    'mem_fraction_static={a.mem_fraction_static}")'
)
PATTERNS = {
    "weight_gb": r"Load weight end\..*?mem usage=([\d.]+) GB",
    "chunked_prefill_size": r"chunked_prefill_size=(-?\d+)",
    "mem_fraction_static": r"mem_fraction_static=([\d.]+)",
}
POOL_SIZES = ("max_total_num_tokens", "full_layer_tokens", "swa_layer_tokens")


def parse_log(text: str) -> dict:
    """The pool sizes (as pool_usage reads a server log) and the first value of each pattern in a
    bench_one_batch log; None where one never appeared."""
    found = {key: None for key in POOL_SIZES} | pool_usage.pool_sizes(text)
    for key, pattern in PATTERNS.items():
        match = re.search(pattern, text)
        found[key] = (
            None if match is None else (float if "." in match.group(1) else int)(match.group(1))
        )
    return found


def bench_one_batch_args(model: Path, memory: str) -> list[str]:
    """One tiny eager batch on the launch preset's backends; `explicit` fixes the memory
    fraction."""
    args = [
        "--model-path",
        str(model),
        "--load-format",
        "dummy",
        *BACKENDS,
        *NO_GRAPHS,
        "--batch-size",
        "1",
        "--input-len",
        "32",
        "--output-len",
        "4",
    ]
    return args + (["--mem-fraction-static", EXPLICIT_FRACTION] if memory == "explicit" else [])


def checkpoint_dir(variant: str, arch: str) -> Path:
    return REPO / "checkpoints" / f"{variant}-{arch}-config-only"


def measure(build: str, model: Path, memory: str, log: Path) -> dict:
    args = bench_one_batch_args(model, memory)
    with open(log, "w") as f:
        done = subprocess.run(
            in_build(build, ["python3", "-c", SETTLED, *args]),
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        if done.returncode == 0:
            done = subprocess.run(
                in_build(build, ["python3", "-m", "sglang.bench_one_batch", *args]),
                stdout=f,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
    return {**parse_log(log.read_text(errors="replace")), "exit_code": done.returncode}


def table(rows: list[dict]) -> str:
    lines = [
        "| variant | arch | memory | build | weights (GB) | max_total_num_tokens | full "
        "/ SWA tokens | "
        "chunked prefill | mem fraction | exit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['arch']} | {r['memory']} | {r['build']} | {r['weight_gb']} | "
            f"{r['max_total_num_tokens']} | {r['full_layer_tokens']} / {r['swa_layer_tokens']} | "
            f"{r['chunked_prefill_size']} | {r['mem_fraction_static']} | {r['exit_code']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--variants", nargs="+", default=["31b", "e4b"], choices=["e2b", "e4b", "26b-a4b", "31b"]
    )
    parser.add_argument(
        "--archs", nargs="+", default=["conditional"], choices=["causal", "conditional"]
    )
    parser.add_argument(
        "--builds", nargs="+", default=["pristine", "patched"], choices=["pristine", "patched"]
    )
    parser.add_argument(
        "--memory",
        nargs="+",
        default=["explicit"],
        choices=["explicit", "auto"],
        help=f"explicit: --mem-fraction-static {EXPLICIT_FRACTION}; auto: sglang's own choice",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the bench_one_batch command lines instead"
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.dry_run:
        for variant in args.variants:
            for arch in args.archs:
                for memory in args.memory:
                    for build in args.builds:
                        command = [
                            "python3",
                            "-m",
                            "sglang.bench_one_batch",
                            *bench_one_batch_args(checkpoint_dir(variant, arch), memory),
                        ]
                        print(describe(build, {}, command))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    for variant in args.variants:
        for arch in args.archs:
            model = checkpoint_dir(variant, arch)
            if not (model / "config.json").is_file():
                write_checkpoint(variant, model, arch=arch, repo_root=REPO)
            for memory in args.memory:
                for build in args.builds:
                    name = f"{variant}-{arch}-{memory}-{build}"
                    print(f"memory: {name} ...", flush=True)
                    row = {
                        "variant": variant,
                        "arch": arch,
                        "memory": memory,
                        "build": build,
                        **measure(build, model, memory, out / f"{name}.log"),
                    }
                    ok &= row["exit_code"] == 0 and row["max_total_num_tokens"] is not None
                    rows.append(row)
                    with open(out / "memory.jsonl", "a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    everything = [json.loads(line) for line in (out / "memory.jsonl").read_text().splitlines()]
    (out / "memory.md").write_text(
        table(everything) + "\n"
    )  # this call's rows and earlier calls' into DIR
    print(table(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
