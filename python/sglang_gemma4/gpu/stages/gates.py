"""The gates: checks whose failure fails the GPU proof (what a stage runs is its function's
docstring; table.py names their arguments). Every server they start is the launch preset's."""

from pathlib import Path

from sglang_gemma4.gpu.checks.repro import CASES
from sglang_gemma4.gpu.serve import presets
from sglang_gemma4.gpu.serve.server import build_env_script
from sglang_gemma4.gpu.stages.steps import Step, harness

VARIANTS = ["26b-a4b", "e4b", "31b", "e2b"]


def seeded(args: dict[str, str]) -> list[str]:
    return ["--seed", args["seed"]] if args["seed"] else []


def smoke(choice, args, out):
    """the four variants, full size, dummy weights, CUDA graphs (patched build): server up,
    /generate, /v1/chat/completions, KV pool sizes (CHOICE picks variants)"""
    return [
        harness(
            "checks.smoke",
            "--out",
            str(out / "smoke"),
            "--build",
            "patched",
            "--variants",
            *(choice or VARIANTS),
            "--",
            *presets.SMALL_GRAPHS,
        )
    ]


def bad_input(choice, args, out):
    """malformed and hostile requests against a server (default variant e2b)"""
    return [
        harness(
            "checks.bad_input", "--start", (choice or ["e2b"])[0], "--out", str(out / "bad-input")
        )
    ]


def access(choice, args, out):
    """who a patched server lets in (docs/access.md): admin routes, keys, CORS, the websocket,
    client chat templates, redaction; one server without keys, one with both (default variant
    e2b)"""
    return [
        harness(
            "checks.access_check", "--variant", (choice or ["e2b"])[0], "--out", str(out / "access")
        )
    ]


def fuzz(choice, args, out):
    """generated hostile requests (checks/fuzz.py) against a patched server (default variant e2b):
    requests= over /generate, /v1/completions and /v1/chat/completions, streaming and not, seed=
    (default random, recorded); PASS needs 2xx/4xx answers only, the server alive, its KV pool
    drained, a good request answered"""
    return [
        harness(
            "checks.fuzz",
            "--start",
            (choice or ["e2b"])[0],
            "--out",
            str(out / "fuzz"),
            "--requests",
            args["requests"],
            *seeded(args),
        )
    ]


def fuzz_routes(choice, args, out):
    """fuzzer v2 (checks/fuzz.py --routes) against a patched server (default variant e2b) started
    with an admin key: requests= generated requests to every route of checks/routes.py (raw HTTP
    abuse, disconnects, admin routes with and without the key), witnesses alongside, seed=; PASS
    needs no 5xx, no death, the pool drained, a good request answered and no witness refused or
    aborted"""
    return [
        harness(
            "checks.fuzz",
            "--routes",
            "--start",
            (choice or ["e2b"])[0],
            "--out",
            str(out / "fuzz-routes"),
            "--requests",
            args["requests"],
            *seeded(args),
        )
    ]


def sampling_fuzz(choice, args, out):
    """sampling values that can make probabilities NaN/inf (checks/sampling_fuzz.py), in rounds
    mixing them with good requests, against a patched server (default variant e2b): requests=,
    seed=; PASS needs no 5xx, every good request served, the server alive, its KV pool drained"""
    return [
        harness(
            "checks.sampling_fuzz",
            "--start",
            (choice or ["e2b"])[0],
            "--out",
            str(out / "sampling-fuzz"),
            "--requests",
            args["requests"],
            *seeded(args),
        )
    ]


def gpu_tests(choice, args, out):
    """every patch's tests on the GPU against the bundle's patched tree (CUDA kernels for real, and
    the `gpu`-marked cases CI skips; also the graph-replay timer's), or the test files in tests="""
    prefix = Path(build_env_script("patched")).parent
    tree = Path(f"{prefix}-tree")  # the layout the tests expect: TREE/python/sglang
    return [
        Step(
            ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", *args["tests"].split()),
            build="patched",
            env={"SGLANG_GEMMA4_TREE": str(tree)},
            report=out / "gpu-tests.log",
            shown_lines=15,
            link=(tree / "python" / "sglang", prefix / "patched" / "sglang"),
        )
    ]


def serve(choice, args, out):
    """`make serve` as a user runs it (patched build): checkpoint made, served, one request"""
    server = Step(
        ("make", "serve", f"SERVE_FLAGS=-- {' '.join(presets.SMALL_GRAPHS)}"),
        build="patched",
        package_on_top=False,
        report=out / "serve.log",
    )
    return [harness("checks.ask", report=out / "serve-check.txt", beside=server)]


def parity(choice, args, out):
    """reduced-layer random-weight checkpoints: pristine and patched vs transformers (default all
    four variants, or builds=; e.g. parity:e2b,e4b); E2B/E4B also with CUDA graphs off; flags= adds
    launch flags to every server (e.g. the preset's FP8 KV: parity:flags=--kv-cache-dtype fp8_e4m3);
    patched-env= (KEY=VALUE ...) is given to the patched servers; long= (TOKENS ...) adds prompts of
    those lengths"""
    return [
        harness(
            "checks.parity",
            "--out",
            str(out / "parity"),
            "--variants",
            *(choice or ["e2b", "e4b", "26b-a4b", "31b"]),
            "--builds",
            *args["builds"].split(),
            "--patched-env",
            *args["patched-env"].split(),
            "--eager-variants",
            "e2b",
            "e4b",
            f"--server-flags={args['flags']}",  # one word: a lone --flag is not read as an option
            "--long",
            *args["long"].split(),
        )
    ]


def repro(choice, args, out):
    """each crash_repro case (or repro:NAME) against the pristine and the patched build; the
    pristine build is expected to crash: only the patched one must survive"""
    return [
        harness(
            "checks.repro",
            "--case",
            case,
            "--build",
            build,
            "--out",
            str(out / "repro"),
            may_fail=build == "pristine",
        )
        for case in choice or list(CASES)
        for build in ("pristine", "patched")
    ]


def ab(choice, args, out):
    """pristine vs patched, same call: chat 1000/1000 and batch-1 decode, or workloads= (default
    26b-a4b; flags= replaces the server flags; patched-env= (KEY=VALUE ...) is given to the patched
    servers)"""
    return [
        harness(
            "studies.bench",
            "--variant",
            v,
            "--builds",
            "pristine",
            "patched",
            "--workloads",
            *args["workloads"].split(),
            "--out",
            str(out / f"ab-{v}"),
            "--patched-env",
            *args["patched-env"].split(),
            "--",
            *args["flags"].split(),
        )
        for v in choice or ["26b-a4b"]
    ]
