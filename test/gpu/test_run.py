"""scripts/gpu/check.sh expanded, without a GPU: every stage of the table (gates and experiments)
run with DRY_RUN=1 prints its commands and the sglang servers (and bench_one_batch runs) they would
start. Each of those parses with the pinned sglang's own argument parser, each
sglang switch set in their environment is one the patched tree reads, and each module of this
package they run imports against the patched tree and accepts its arguments."""

import functools
import importlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from patched_tree import TREE
from sglang_server_args import parse_server_args

from sglang_gemma4.gpu import run
from sglang_gemma4.gpu.serve import presets
from sglang_gemma4.gpu.stages import experiments, table
from sglang_gemma4.gpu.stages.steps import Comparison, env_words

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "gpu" / "check.sh"
GATES = [
    "smoke",
    "bad-input",
    "access",
    "fuzz",
    "fuzz-routes",
    "sampling-fuzz",
    "gpu-tests",
    "serve",
    "parity",
    "repro",
    "ab",
]
# arguments a stage needs, and choices that reach every named setup
ARGS = {
    "opt-in-ab": ":switches=SGLANG_OPT_GEMMA4_MOE_DUAL_STREAM=0 --enable-fused-moe-sum-all-reduce",
    "profile": ":env=SGLANG_OPT_GEMMA4_MOE_DUAL_STREAM=0",
    "step-trace": ":setups=a=patched; b=pristine:streams=32:prompt-len=1000",
    "coldstart": f":starts={' '.join(experiments.COLDSTARTS)}",
    "multi-gpu-ab": ":setups=" + " ".join(experiments.MULTI_GPU_SETUPS),
    "multi-gpu-parity": ":setups=" + " ".join(experiments.MULTI_GPU_SETUPS),
    "swa": ":" + ",".join(experiments.SWA_SETUPS),
    "kv-capacity": ":" + ",".join(experiments.KV_PARTS),
    "mtp": ":" + ",".join(presets.SIMULATED_ACCEPT_LEN),
}


@functools.cache
def expanded() -> str:
    stages = [s + ARGS.get(s, "") for s in table.STAGES]
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "OUT": "/tmp/gpu-results",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", str(CHECK), *stages], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def commands(kind: str) -> list[tuple[str, dict, list[str]]]:
    """(build, environment, argv) of each printed command whose argv runs module `kind`."""
    found = []
    for line in expanded().splitlines():
        build, sep, rest = line.partition(": ")
        if not sep or not re.fullmatch(r"pristine|patched|harness", build):
            continue
        words = shlex.split(rest)
        env = {}
        if words[0] == "env":
            words = words[1:]
            while "=" in words[0]:
                key, _, value = words.pop(0).partition("=")
                env[key] = value
        if words[1:3] == ["-m", kind] or (
            kind.endswith(".") and words[1] == "-m" and words[2].startswith(kind)
        ):
            found.append((build, env, words))
    return found


def test_check_sh_names_the_gates_and_hands_every_stage_to_the_runner():
    assert [name for name, stage in table.STAGES.items() if stage.gate] == GATES
    header, _, body = CHECK.read_text().partition("set -euo pipefail")
    assert all(name in header for name in GATES)
    assert "exec python3 -m sglang_gemma4.gpu.run" in body and "case" not in body


def test_every_server_parses_with_sglangs_own_arguments():
    servers = commands("sglang.launch_server")
    assert len(servers) > 60  # every stage's servers, not a few
    for build, _, argv in servers:
        parsed = parse_server_args(argv[3:])
        assert parsed.attention_backend == "triton", argv  # the preset is under every server
        assert build in ("pristine", "patched")


def test_multi_gpu_servers_are_the_preset_at_their_size():
    """Two GPUs, as the preset serves them: 26B-A4B on the KV split at tp 2 (unified only on one GPU
    per model copy), on the unified pool at dp 2."""
    sizes = set()
    for _, _, argv in commands("sglang.launch_server"):
        parsed = parse_server_args(argv[3:])
        if parsed.tp_size == parsed.dp_size == 1:
            continue
        variant = Path(parsed.model_path).name
        sizes.add((variant, "dummy" in argv, parsed.tp_size, parsed.dp_size))
        if variant == "26b-a4b":
            assert parsed.enable_unified_memory == (parsed.tp_size == 1), argv
        assert argv.count("--tp-size") == 1 and argv.count("--dp-size") == 1, argv
    # multi-gpu-ab's servers (dummy weights) and multi-gpu-parity's (random weights)
    assert sizes == {
        (v, dummy, tp, dp)
        for v in ("26b-a4b", "31b")
        for dummy in (True, False)
        for tp, dp in ((2, 1), (1, 2))
    }


def test_every_bench_one_batch_run_parses_with_sglangs_own_arguments():
    runs = commands("sglang.bench_one_batch")
    assert {"--profile" in argv for _, _, argv in runs} == {
        True,
        False,
    }  # profile's two kinds, memory's
    for _, _, argv in runs:
        parse_server_args(argv[3:], bench_one_batch=True)


def test_every_switch_a_server_is_given_is_read_by_the_patched_tree():
    switches = {
        key
        for kind in ("sglang.launch_server", "sglang.bench_one_batch", "sglang_gemma4.")
        for _, env, _ in commands(kind)
        for key in env
        if key.startswith("SGLANG_OPT") or key == "SGLANG_GEMMA4_YOCO"
    }
    assert "SGLANG_OPT_HOPPER_EXTEND_ATTENTION_TILES" in switches
    source = "\n".join(
        p.read_text(errors="replace") for p in (TREE / "python" / "sglang").rglob("*.py")
    )
    assert sorted(s for s in switches if s not in source) == []


def mtp_servers() -> list[tuple[dict, list[str]]]:
    return [
        (env, argv)
        for _, env, argv in commands("sglang.launch_server")
        if "--speculative-algorithm" in argv
    ]


def test_every_mtp_server_simulates_its_variants_acceptance():
    """Dummy weights accept every draft token: each MTP server of dummy weights in every stage
    (smoke, bench) runs with the simulated acceptance of presets.py, whose switches the patched tree
    reads."""
    mtp = [(env, argv) for env, argv in mtp_servers() if "dummy" in argv]
    variants = {Path(argv[argv.index("--model-path") + 1]).name for _, argv in mtp}
    assert variants == set(presets.SIMULATED_ACCEPT_LEN)  # mtp's smoke on both, and the benches
    assert (
        len(mtp) >= 7
    )  # mtp (2 builds x 2 variants), mtp-fill's on side, tiles-ab's two MTP setups
    for env, argv in mtp:
        variant = Path(argv[argv.index("--model-path") + 1]).name
        assert {
            k: env.get(k) for k in presets.simulated_acceptance(variant)
        } == presets.simulated_acceptance(variant)
    environ = (TREE / "python" / "sglang" / "srt" / "environ.py").read_text()
    assert all(key in environ for key in presets.simulated_acceptance("31b"))


def test_mtp_greedy_serves_its_own_drafts_with_real_acceptance_under_a_small_kv_budget():
    real = [(env, argv) for env, argv in mtp_servers() if "dummy" not in argv]
    assert {Path(argv[argv.index("--model-path") + 1]).name for _, argv in real} == {
        "26b-a4b",
        "31b",
    }
    for env, argv in real:
        model = argv[argv.index("--model-path") + 1]
        assert argv[argv.index("--speculative-draft-model-path") + 1] == f"{model}-assistant"
        assert not set(env) & set(presets.simulated_acceptance("31b"))
        parsed = parse_server_args(argv[3:])
        assert (parsed.max_total_tokens, parsed.swa_full_tokens_ratio) == (32768, 0.25)
    off = [
        argv
        for _, _, argv in commands("sglang.launch_server")
        if "mtp-greedy" in " ".join(argv) and "--speculative-algorithm" not in argv
    ]
    assert len(off) == 2  # each variant also served without MTP, the same flags otherwise


def test_an_mtp_comparison_names_a_bare_build_to_give_it_the_simulated_acceptance(tmp_path):
    (bench,) = Comparison("x", ("pristine", "on=patched A=1 --flag"), ("chat",), mtp=True).steps(
        tmp_path
    )
    acceptance = " ".join(env_words(presets.simulated_acceptance("26b-a4b")))
    configs = [bench.argv[i + 1] for i, word in enumerate(bench.argv) if word == "--config"]
    assert configs == [f"pristine=pristine {acceptance}", f"on=patched {acceptance} A=1 --flag"]
    assert bench.argv[bench.argv.index("--builds") + 1] == "--config"  # no plain build left


def test_mtp_flags_replace_the_graph_flags_of_both_mtp_ab_sides(tmp_path):
    def tails(steps):
        return [list(s.argv[s.argv.index("--") + 1 :]) for s in steps if "--" in s.argv]

    assert tails(table.expand("mtp-ab:31b", tmp_path).steps) == [list(presets.BENCH_GRAPHS)] * 2
    decode_only = " ".join(presets.BENCH_GRAPHS_DECODE_ONLY)
    assert (
        tails(table.expand(f"mtp-ab:31b:flags={decode_only}", tmp_path).steps)
        == [list(presets.BENCH_GRAPHS_DECODE_ONLY)] * 2
    )


def test_mtp_stages_with_static_kv_among_their_flags_serve_both_sides_on_the_kv_split(tmp_path):
    """26B-A4B serves the unified pool without MTP and the split with it: --static-kv in flags=
    keeps the MTP-off side on MTP's split, so that the comparison changes MTP alone."""

    def unified_per_side(stage: str, flags: str) -> list[bool]:
        steps = table.expand(f"{stage}:flags={flags}", tmp_path).steps
        lines = []
        for step in steps[:-1]:  # the last one only summarizes
            done = subprocess.run(
                [sys.executable, "-m", step.module, "--dry-run", *step.argv[3:]],
                capture_output=True,
                text=True,
                timeout=120,
            )
            lines += done.stdout.splitlines()
        return ["--enable-unified-memory" in line for line in lines]

    for stage in ("mtp-ab:26b-a4b", "mtp-fill"):
        assert unified_per_side(stage, "--cuda-graph-max-bs-decode 32") == [True, False]
        assert unified_per_side(stage, "--cuda-graph-max-bs-decode 32 --static-kv") == [
            False,
            False,
        ]


def test_spec_step_gives_its_servers_the_switches_and_names_the_setup(tmp_path):
    (step,) = table.expand(
        "spec-step:31b:builds=patched:env=SGLANG_OPT_GROUPED_VERIFY_ATTENTION=0"
        ":label=extend-verify",
        tmp_path,
    ).steps
    env = step.argv[step.argv.index("--env") + 1 : step.argv.index("--label")]
    assert list(env) == ["SGLANG_OPT_GROUPED_VERIFY_ATTENTION=0"]
    assert step.argv[step.argv.index("--label") + 1] == "patched-extend-verify"
    done = subprocess.run(
        [sys.executable, "-m", step.module, "--dry-run", *step.argv[3:]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (line,) = done.stdout.splitlines()
    assert "SGLANG_OPT_GROUPED_VERIFY_ATTENTION=0" in shlex.split(line.partition(": ")[2])


def test_every_module_of_this_package_imports_and_accepts_its_arguments():
    runs = commands("sglang_gemma4.")
    modules = {argv[2] for _, _, argv in runs}
    assert {
        "sglang_gemma4.gpu.studies.bench",
        "sglang_gemma4.gpu.kernels.tune_gemma4_moe",
        "sglang_gemma4.gpu.studies.start_times",
    } <= modules
    for _, _, argv in runs:
        if argv[2] in run.DRY_RUNS or argv[2] == "sglang_gemma4":
            continue  # parsed when they printed their servers; the CLI has its own tests
        if argv[2] == "sglang_gemma4.gpu.checks.ask":
            assert argv[3:] == []  # the serve gate's request, to the server `make serve` started
            continue
        module = importlib.import_module(argv[2])  # sglang's modules from the patched tree
        module.parser().parse_args(argv[3:])


def test_a_bad_flag_in_an_experiment_fails_the_expansion(tmp_path, monkeypatch):
    monkeypatch.setattr(experiments, "DECODE_ONLY", ("--cuda-graph-max-batch", "32"))
    (bench,) = [
        s
        for s in table.expand("swa:r0.8", tmp_path).steps
        if s.module == "sglang_gemma4.gpu.studies.bench"
    ]
    done = subprocess.run(
        [sys.executable, "-m", bench.module, "--dry-run", *bench.argv[3:]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (line,) = done.stdout.splitlines()
    with pytest.raises(AssertionError, match="cuda-graph-max-batch"):
        parse_server_args(shlex.split(line.partition(": ")[2])[3:])


def test_unknown_experiments_and_setups_are_refused(tmp_path):
    for stage, message in (
        ("no-such", "unknown stage"),
        ("swa:r0.9", "unknown setup r0.9"),
        ("multi-gpu-ab:setups=tp4", "unknown setup tp4"),
        ("multi-gpu-parity:setups=tp2 tp8", "unknown setup tp8"),
        ("kv-capacity:r48", "unknown part r48"),
        ("mtp:e2b", "no MTP draft for 'e2b'"),
        ("fuzz:rounds=3", "unknown argument rounds"),
        ("opt-in-ab", "needs switches="),
    ):
        with pytest.raises(SystemExit, match=message):
            table.expand(stage, tmp_path)


def test_a_stage_word_holds_choices_and_arguments_whose_values_keep_spaces_commas_and_equals(
    tmp_path,
):
    stage = table.expand("fuzz:e4b:requests=12:seed=7:timeout=30", tmp_path)
    (step,) = stage.steps
    assert step.argv[3:] == (
        "--start",
        "e4b",
        "--out",
        str(tmp_path / "fuzz"),
        "--requests",
        "12",
        "--seed",
        "7",
    )
    assert stage.timeout_s == 30 and table.expand("fuzz", tmp_path).timeout_s == table.TIMEOUT_S
    (trace,) = table.expand(
        "step-trace:31b:setups=a=patched X=1,Y=2 --f; b=pristine", tmp_path
    ).steps
    configs = [trace.argv[i + 1] for i, word in enumerate(trace.argv) if word == "--config"]
    assert (
        configs == ["a=patched X=1,Y=2 --f", "b=pristine"]
        and "--variant" in trace.argv
        and "31b" in trace.argv
    )


def test_the_long_stage_runs_its_setups_for_each_variant_asked(tmp_path):
    steps = table.expand("long:patched,unified:variants=31b e4b:workloads=long-2x250k", tmp_path)
    variants = [s.argv[s.argv.index("--variant") + 1] for s in steps.steps]
    assert variants == ["31b", "e4b"]
    for step in steps.steps:
        configs = [step.argv[i + 1] for i, w in enumerate(step.argv) if w == "--config"]
        assert configs == ["patched=patched", "unified=patched --enable-unified-memory"]
        assert step.argv[step.argv.index("--workloads") + 1] == "long-2x250k"
    (default,) = table.expand("long:patched", tmp_path).steps
    assert default.argv[default.argv.index("--variant") + 1] == "26b-a4b"


def test_an_environment_knob_the_table_replaced_is_refused(monkeypatch):
    monkeypatch.setenv("FUZZ_REQUESTS", "5")
    with pytest.raises(SystemExit, match="FUZZ_REQUESTS -> fuzz:requests="):
        run.main(["fuzz", "--dry-run"])


def test_no_make_target_repeats_a_stage():
    makefile = (REPO / "Makefile").read_text()
    assert not re.search(r"sglang_gemma4\.gpu\.(checks|studies|kernels)\.", makefile)


SLOW_STAGE = """
import sys
from pathlib import Path
from sglang_gemma4.gpu import run
from sglang_gemma4.gpu.stages import table
from sglang_gemma4.gpu.stages.steps import Step

def slow(choice, args, out):
    return [Step(("bash", "-c", "echo partial > partial.txt; echo started; exec sleep 60"), report=out / "slow.log")]

def quick(choice, args, out):
    return [Step(("bash", "-c", "echo done > quick.txt"))]

table.STAGES.update(slow=table.Stage(slow), quick=table.Stage(quick))
run.set_up_host = lambda results: results.mkdir(parents=True)
run.REPO = Path(sys.argv[1]) / "results"  # the steps' working directory
sys.exit(run.main([*sys.argv[2:], "--out", sys.argv[1], "--host-setup"]))
"""  # noqa: E501 (the script is run as it stands)


def runner(tmp_path, *stages) -> subprocess.Popen:
    (tmp_path / "env-pristine.sh").write_text("true\n")
    env = {**os.environ, "SGLANG_GEMMA4_PREFIX": str(tmp_path)}
    return subprocess.Popen([sys.executable, "-c", SLOW_STAGE, str(tmp_path), *stages], env=env)


def packed(tmp_path) -> set[str]:
    listing = subprocess.run(
        ["tar", "-tzf", str(tmp_path / "results.tgz")], capture_output=True, text=True
    )
    return set(listing.stdout.split())


def test_a_stopped_run_keeps_and_packs_what_its_stage_wrote(tmp_path):
    started = runner(tmp_path, "quick", "slow")
    log = tmp_path / "results" / "slow.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and "started" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    started.send_signal(signal.SIGTERM)
    assert started.wait(timeout=60) == 1
    assert {
        "results/quick.txt",
        "results/partial.txt",
        "results/slow.log",
        "results/stages.jsonl",
    } <= packed(tmp_path)
    records = [
        json.loads(line)
        for line in (tmp_path / "results" / "stages.jsonl").read_text().splitlines()
    ]
    assert [(r["stage"], r["ok"], r["steps_done"]) for r in records] == [
        ("quick", True, 1),
        ("slow", False, 0),
    ]


def test_a_stage_past_its_time_limit_is_stopped_and_the_next_one_runs(tmp_path):
    started = runner(tmp_path, "slow:timeout=2", "quick")
    assert started.wait(timeout=60) == 1
    records = [
        json.loads(line)
        for line in (tmp_path / "results" / "stages.jsonl").read_text().splitlines()
    ]
    assert [(r["stage"], r["ok"], r["timed_out"]) for r in records] == [
        ("slow:timeout=2", False, True),
        ("quick", True, False),
    ]
    assert {"results/partial.txt", "results/quick.txt"} <= packed(tmp_path)
