"""The launch presets (gpu/serve/presets.py) and the launcher behind scripts/launch_gemma4.sh: every
flag parses with the pinned sglang's own server arguments; the prebuild runs first, for the served
checkpoint and TP size, and can be skipped; a failed prebuild still starts the server; the MoE
variant gets sglang's fused MoE sum, in serving and in the profiler alike; a harness server is
started from an argument list, never a shell string."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from sglang_server_args import parse_server_args

from sglang_gemma4.gpu.serve import launch, presets, server
from sglang_gemma4.gpu.serve.server import Server
from sglang_gemma4.gpu.studies import profile

REPO = Path(__file__).resolve().parents[3]
EXTRA_SETS = [
    presets.NO_GRAPHS,
    presets.SMALL_GRAPHS,
    presets.PARITY_GRAPHS,
    presets.BENCH_GRAPHS,
    presets.BENCH_GRAPHS_DECODE_ONLY,
]


def dry_run(*argv: str) -> list[list[str]]:
    args = launch.parse(["--dry-run", *argv])
    return [c for c in launch.commands(args) if c]


@pytest.mark.parametrize("variant", list(presets.PRESETS))
def test_every_preset_parses_with_sglangs_server_arguments(variant):
    for mtp in (False, True):
        for extra in [(), *EXTRA_SETS]:
            args = presets.server_args(
                variant,
                "/ckpt",
                tp=2,
                dp=3,
                dummy_weights=True,
                draft="/draft" if mtp else None,
                api_key="k",
            )
            parsed = parse_server_args([*args, *extra])
            assert (
                parsed.model_path == "/ckpt"
                and parsed.tp_size == 2
                and parsed.dp_size == 3
                and parsed.load_format == "dummy"
            )
            assert parsed.attention_backend == "triton" and parsed.grammar_backend == "xgrammar"
            assert parsed.tool_call_parser == "gemma4" and parsed.reasoning_parser == "gemma4"
            assert (parsed.speculative_algorithm == "NEXTN") is mtp
            assert parsed.enable_fused_moe_sum_all_reduce is (variant == "26b-a4b")


def test_structured_output_and_the_parsers_are_on_by_default_and_each_can_be_turned_off():
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    # the names sglang registers for Gemma-4's formats
    assert presets.PARSERS[1] in FunctionCallParser.ToolCallParserEnum
    assert presets.PARSERS[3] in ReasoningParser.DetectorMap
    off = parse_server_args(presets.server_args("31b", "/ckpt", structured_output=False))
    assert off.grammar_backend == "none" and off.tool_call_parser == "gemma4"
    bare = parse_server_args(presets.server_args("31b", "/ckpt", parsers=False))
    assert (
        bare.grammar_backend == "xgrammar"
        and bare.tool_call_parser is None
        and bare.reasoning_parser is None
    )
    # and a user's flag after the preset's wins
    assert (
        parse_server_args(
            [*presets.server_args("e4b", "/ckpt"), *presets.NO_STRUCTURED_OUTPUT]
        ).grammar_backend
        == "none"
    )
    serve = dry_run(
        "e4b", "--model", "m", "--no-prebuild", "--no-structured-output", "--no-parsers"
    )[0]
    assert (
        "--tool-call-parser" not in serve
        and serve[serve.index("--grammar-backend", serve.index("xgrammar")) + 1] == "none"
    )


def test_multimodal_loads_the_towers_only_when_asked(tmp_path):
    """Text-only by default (0013 skips the towers, media is refused); --multimodal turns them
    on."""
    from sglang_gemma4.gpu.serve.variants import write_config

    from sglang.srt.configs.model_config import ModelConfig

    model = write_config(tmp_path, "e4b", "conditional")
    for multimodal in (False, True):
        parsed = parse_server_args(presets.server_args("e4b", str(model), multimodal=multimodal))
        assert parsed.enable_multimodal is (True if multimodal else None)
        assert ModelConfig.from_server_args(parsed).is_multimodal is multimodal
        # the vision tower's attention on a backend the offline bundle has (not FA3, sglang's pick
        # on Hopper, whose library the bundle leaves out)
        assert parsed.mm_attention_backend == ("triton_attn" if multimodal else None)
    serve = dry_run("e4b", "--model", "m", "--no-prebuild", "--multimodal")[0]
    assert (
        serve.count("--enable-multimodal") == 1
        and "--enable-multimodal" not in dry_run("e4b", "--model", "m")[-1]
    )
    # without --model: a config-only checkpoint of the conditional class, apart from the text-only
    # one
    bare = dry_run("31b", "--no-prebuild", "--multimodal")[0]
    assert bare[bare.index("--model-path") + 1] == str(REPO / "checkpoints" / "31b-multimodal")


def test_json_under_a_schema_has_no_whitespace_a_model_could_repeat():
    import json

    import xgrammar
    from xgrammar.testing import _is_grammar_accept_string

    parsed = parse_server_args(presets.server_args("26b-a4b", "/ckpt"))
    assert parsed.constrained_json_disable_any_whitespace
    # what sglang's xgrammar backend compiles with that flag: one layout, no runs of whitespace
    schema = json.dumps(
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    )
    grammar = xgrammar.Grammar.from_json_schema(
        schema, any_whitespace=not parsed.constrained_json_disable_any_whitespace
    )
    assert _is_grammar_accept_string(grammar, json.dumps({"a": [1, 2]}))
    assert not _is_grammar_accept_string(grammar, '{"a":  [1, 2]}')
    assert not _is_grammar_accept_string(grammar, '{\n\n\n"a": [1, 2]}')


def test_the_bundle_carries_the_presets_grammar_backend():
    from sglang_gemma4.stack.bundle import NOT_LOADED

    backend = presets.BACKENDS[presets.BACKENDS.index("--grammar-backend") + 1]
    assert (
        backend == "xgrammar" and backend not in NOT_LOADED and "apache-tvm-ffi" not in NOT_LOADED
    )


def test_mtp_benchmarks_simulate_each_variants_acceptance():
    assert presets.simulated_acceptance("26b-a4b") == {
        "SGLANG_SIMULATE_ACC_LEN": "2.8",
        "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
    }
    assert presets.simulated_acceptance("31b")["SGLANG_SIMULATE_ACC_LEN"] == "3.1"
    assert presets.simulated_acceptance("31b", 2.0)["SGLANG_SIMULATE_ACC_LEN"] == "2.0"
    with pytest.raises(ValueError, match="no MTP draft for 'e2b'"):
        presets.simulated_acceptance("e2b")
    # the draft tokens the preset asks for are the most a step can accept
    args = presets.server_args("26b-a4b", "/ckpt", draft="/draft")
    assert int(args[args.index("--speculative-num-draft-tokens") + 1]) == presets.MTP_DRAFT_TOKENS


def test_a_logged_accept_length_at_the_maximum_is_a_problem():
    assert (
        presets.full_acceptance_problem(None) is None
    )  # nothing logged (MTP off, or no decode line yet)
    assert presets.full_acceptance_problem(3.99) is None
    assert "logged accept length 4.00 (every draft accepted)" in presets.full_acceptance_problem(
        4.0
    )


def test_a_flag_sglang_does_not_know_fails_the_parse():
    with pytest.raises(AssertionError, match="--cuda-graph-max-batch"):
        parse_server_args(["--model-path", "/ckpt", "--cuda-graph-max-batch", "8"])
    with pytest.raises(AssertionError, match="invalid choice"):
        parse_server_args(["--model-path", "/ckpt", "--attention-backend", "no-such-backend"])


def test_prebuild_runs_first_for_the_served_checkpoint_and_tp(tmp_path):
    prebuild, serve = dry_run("31b", "--model", str(tmp_path / "ckpt"), "--tp", "2")
    assert prebuild[1:] == [
        "-m",
        "sglang_gemma4.gpu.serve.prebuild",
        "--model",
        str(tmp_path / "ckpt"),
        "--tp",
        "2",
    ]
    assert (
        serve[1:3] == ["-m", "sglang.launch_server"] and serve[serve.index("--tp-size") + 1] == "2"
    )


def test_no_prebuild_by_flag_or_environment(tmp_path, monkeypatch):
    assert [c[2] for c in dry_run("31b", "--model", "m", "--no-prebuild")] == [
        "sglang.launch_server"
    ]
    monkeypatch.setenv("SGLANG_GEMMA4_PREBUILD", "0")
    assert [c[2] for c in dry_run("31b", "--model", "m")] == ["sglang.launch_server"]


def test_a_failed_prebuild_still_starts_the_server(monkeypatch, capsys):
    ran, execs = [], []
    monkeypatch.setattr(
        launch.subprocess,
        "run",
        lambda argv: ran.append(argv) or subprocess.CompletedProcess(argv, 1),
    )
    monkeypatch.setattr(launch.os, "execv", lambda path, argv: execs.append(argv))
    launch.main(["e2b", "--model", "m"])
    assert [c[2] for c in ran + execs] == [
        "sglang_gemma4.gpu.serve.prebuild",
        "sglang.launch_server",
    ]
    assert "prebuild incomplete" in capsys.readouterr().err


def test_extra_flags_come_last_and_mtp_needs_a_draft_with_a_model():
    (serve,) = dry_run(
        "26b-a4b",
        "--model",
        "m",
        "--draft",
        "d",
        "--mtp",
        "--no-prebuild",
        "--",
        "--cuda-graph-max-bs-decode",
        "8",
    )
    assert serve[-2:] == ["--cuda-graph-max-bs-decode", "8"] and "d" in serve
    with pytest.raises(SystemExit, match="--draft"):
        dry_run("26b-a4b", "--model", "m", "--mtp")


def test_kv_fp8_serves_the_kv_cache_in_fp8_and_is_off_by_default():
    for variant in presets.PRESETS:
        (plain,) = dry_run(variant, "--model", "m", "--no-prebuild")
        (fp8,) = dry_run(variant, "--model", "m", "--no-prebuild", "--kv-fp8")
        assert "--kv-cache-dtype" not in plain
        assert fp8[fp8.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
        # nothing else changes, but an FP8 cache keeps the static KV split
        assert [a for a in fp8 if a not in presets.KV_FP8] == [
            a for a in plain if a not in presets.UNIFIED_KV
        ], variant
        assert parse_server_args(fp8[fp8.index("--model-path") :]).kv_cache_dtype == "fp8_e4m3"
        assert parse_server_args(plain[plain.index("--model-path") :]).kv_cache_dtype == "auto"
    # with MTP too, and a user's own --kv-cache-dtype after -- still wins
    (serve,) = dry_run(
        "26b-a4b",
        "--model",
        "m",
        "--draft",
        "d",
        "--mtp",
        "--kv-fp8",
        "--no-prebuild",
        "--",
        "--kv-cache-dtype",
        "bf16",
    )
    assert parse_server_args(serve[serve.index("--model-path") :]).kv_cache_dtype == "bf16"
    assert "--speculative-algorithm" in serve


def test_fused_moe_sum_for_the_moe_variant_only_as_the_profiler_runs_it(tmp_path):
    for variant in presets.PRESETS:
        (serve,) = dry_run(variant, "--model", "m", "--no-prebuild")
        served = [a for a in serve if a.startswith("--enable-")]
        assert ("--enable-fused-moe-sum-all-reduce" in served) is (variant == "26b-a4b"), variant
        profiled = profile.bench_one_batch_command(variant, tmp_path, tmp_path, [1], False, "run")
        # the model's own options alike; the KV pool's layout is the server's, not the model's
        model_options = [a for a in served if a not in presets.UNIFIED_KV]
        assert [a for a in profiled if a.startswith("--enable-")] == model_options, variant


def test_the_shell_preset_is_the_launcher(tmp_path):
    argv = [
        "26b-a4b",
        "--model",
        str(tmp_path / "a b"),
        "--tp",
        "2",
        "--",
        "--served-model-name",
        "x y",
    ]
    shell = subprocess.run(
        ["bash", str(REPO / "scripts" / "launch_gemma4.sh"), "--dry-run", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert shell.returncode == 0, shell.stderr
    lines = [shlex.split(line) for line in shell.stdout.splitlines()]
    assert [line[1:] for line in lines] == [c[1:] for c in dry_run(*argv)]  # [0]: the interpreter


def test_a_harness_server_starts_from_an_argument_list(tmp_path, argv_of_start):
    s = Server(
        "e2b",
        "patched",
        tmp_path / "log",
        model="/ck pt",
        extra=["--served-model-name", "a b; rm -rf x"],
    )
    argv = argv_of_start(s)
    assert argv[:3] == ["bash", "-c", '. "$0" && PYTHONPATH="$1:$PYTHONPATH" exec "${@:2}"']
    assert argv[3].endswith("env-patched.sh") and argv[4] == str(REPO / "python")
    assert argv[5:] == [
        *server.LAUNCHER,
        "e2b",
        "--port",
        "30000",
        "--model",
        "/ck pt",
        "--",
        "--served-model-name",
        "a b; rm -rf x",
    ]
    # and what a dry run prints is the launch preset's expansion of the same arguments
    build, command = s.describe().split(": ", 1)
    assert build == "patched" and shlex.split(command)[-2:] == [
        "--served-model-name",
        "a b; rm -rf x",
    ]


def test_a_harness_server_gets_what_the_launcher_makes_of_its_command_line(tmp_path):
    s = Server(
        "26b-a4b",
        "patched",
        tmp_path / "log",
        model="/m",
        mtp=True,
        draft="/d",
        port=31000,
        admin_key="k",
        extra=["--served-model-name", "x"],
    )
    options = s.launch_options()
    assert launch.parse(options.argv()) == options
    _, command = launch.commands(launch.parse(["--dry-run", *options.argv()]))
    assert s.describe() == server.describe("patched", {}, command)
    every = launch.Launch(
        "e2b",
        tp=2,
        host="0.0.0.0",
        api_key="a",
        no_prebuild=True,
        no_structured_output=True,
        no_parsers=True,
        dry_run=True,
    )
    assert launch.parse(every.argv()) == every


def test_the_launchers_options_among_a_servers_flags_go_to_the_launcher(tmp_path):
    """A setup's --tp 2 (or sglang's --tp-size 2) must reach the preset, which serves 26B-A4B's KV
    split at tp 2: passed past it, sglang would run tp 2 on the pool the preset chose for tp 1."""
    for flags in (["--tp", "2"], ["--tp-size", "2"], ["--tp-size=2"]):
        s = Server("26b-a4b", "patched", tmp_path / "log", model="/m", extra=[*flags, "--x", "1"])
        assert (s.launch_options().tp, s.launch_options().extra) == (2, ("--x", "1")), flags
        served = shlex.split(s.describe().split(": ", 1)[1])
        assert "--enable-unified-memory" not in served and served.count("--tp-size") == 1
    dp = Server("26b-a4b", "patched", tmp_path / "log", model="/m", extra=["--dp-size", "2"])
    assert dp.launch_options().dp == 2 and "--enable-unified-memory" in dp.describe()
    static = Server("26b-a4b", "patched", tmp_path / "log", model="/m", extra=["--static-kv"])
    assert static.launch_options().static_kv and "--static-kv" not in static.describe()
    for bad in (["--tp"], ["--tp", "two"], ["--dp-size=0"]):
        with pytest.raises(ValueError, match="positive number of GPUs"):
            server.launcher_options(bad)


def test_servers_listen_on_the_port_the_run_names(tmp_path, monkeypatch):
    assert Server("e2b", "patched", tmp_path / "log").port == 30000
    monkeypatch.setenv(server.PORT_ENV, "40000")
    s = Server("e2b", "patched", tmp_path / "log")
    assert s.port == 40000 and s.url == "http://127.0.0.1:40000"
    assert s.launch_options().port == 40000


def test_26b_a4b_serves_one_kv_buffer_unless_mtp_fp8_tp_a_static_split_or_pristine(tmp_path):
    """The unified KV pool where it was measured (26B-A4B without MTP, bf16 KV, one GPU a model
    copy); --static-kv keeps sglang's split, and so does every harness server of the pristine
    build, which cannot serve the pool (0021)."""

    def unified(*argv: str) -> bool:
        (serve,) = dry_run(*argv, "--model", "m", "--no-prebuild")
        return parse_server_args(serve[serve.index("--model-path") :]).enable_unified_memory

    assert unified("26b-a4b") is True
    for variant in ("e2b", "e4b", "31b"):
        assert not unified(variant), variant
    assert not unified("26b-a4b", "--static-kv")
    assert not unified("26b-a4b", "--kv-fp8")
    assert not unified("26b-a4b", "--mtp", "--draft", "d")
    assert not unified("26b-a4b", "--tp", "2") and unified("26b-a4b", "--dp", "2")
    for build, static, expected in (
        ("patched", False, True),
        ("patched", True, False),
        ("pristine", False, False),
    ):
        flags = ["--static-kv"] if static else []
        s = Server("26b-a4b", build, tmp_path / "log", model="/m", extra=flags)
        assert launch.parse(s.launch_options().argv()) == s.launch_options()
        assert ("--enable-unified-memory" in shlex.split(s.describe())) is expected, build


def test_dp_serves_copies_of_the_model_and_is_one_by_default():
    (one,) = dry_run("31b", "--model", "m", "--no-prebuild")
    (two,) = dry_run("31b", "--model", "m", "--no-prebuild", "--dp", "2", "--tp", "2")
    assert parse_server_args(one[one.index("--model-path") :]).dp_size == 1
    parsed = parse_server_args(two[two.index("--model-path") :])
    assert (parsed.dp_size, parsed.tp_size) == (2, 2)


def test_a_size_no_preset_serves_is_refused_with_the_reason(capsys):
    """Gemma-4 12B: no published shapes to size a preset on; the launcher says so instead of
    argparse's bare 'invalid choice', and so does the presets' lookup."""
    for name in ("12b", "12B"):
        with pytest.raises(SystemExit) as exit:
            launch.parse([name])
        assert exit.value.code == 2
        err = capsys.readouterr().err
        assert "Gemma-4 12B has no preset" in err and "26b-a4b" in err, err
    with pytest.raises(ValueError, match="Gemma-4 12B has no preset"):
        presets.preset("12b")
    with pytest.raises(SystemExit):
        launch.parse(["7b"])
    assert "invalid choice: '7b'" in capsys.readouterr().err
