"""0010: MoE Gemma-4 gets swa_full_tokens_ratio 0.15 by default; dense Gemma-4, other models and
any value the user passes keep theirs.  ServerArgs is built from the real CLI parser on CPU from
config.json alone (no weights)."""

import argparse
import logging

import pytest
from gemma4_config import write_config

from sglang.srt.server_args import ServerArgs

UPSTREAM_DEFAULT = 0.8


def server_args(model_dir, *extra):
    """What `launch_server` builds from its argv (prepare_server_args, minus its logging set-up,
    which would detach pytest's log capture)."""
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    argv = ["--model-path", str(model_dir), "--device", "cpu", *extra]
    return ServerArgs.from_cli_args(parser.parse_args(argv))


@pytest.mark.parametrize("arch", ["causal", "conditional"])
def test_moe_default_is_overridden(tmp_path, caplog, arch):
    model = write_config(tmp_path / "m", "26b-a4b", arch)
    with caplog.at_level(logging.INFO):
        args = server_args(model)
    assert args.swa_full_tokens_ratio == pytest.approx(0.15)
    assert [r for r in caplog.messages if "Gemma4 MoE: set swa_full_tokens_ratio=0.15" in r]


@pytest.mark.parametrize("variant", ["31b", "e4b", "e2b"])
@pytest.mark.parametrize("arch", ["causal", "conditional"])
def test_dense_keeps_default(tmp_path, caplog, variant, arch):
    model = write_config(tmp_path / "m", variant, arch)
    with caplog.at_level(logging.INFO):
        args = server_args(model)
    assert args.swa_full_tokens_ratio == pytest.approx(UPSTREAM_DEFAULT)
    assert [r for r in caplog.messages if "Gemma4 dense: keep default swa_full_tokens_ratio" in r]


@pytest.mark.parametrize("value", ["0.8", "0.5"])
@pytest.mark.parametrize("arch", ["causal", "conditional"])
def test_user_value_is_kept_for_moe(tmp_path, caplog, arch, value):
    model = write_config(tmp_path / "m", "26b-a4b", arch)
    with caplog.at_level(logging.INFO):
        args = server_args(model, "--swa-full-tokens-ratio", value)
    assert args.swa_full_tokens_ratio == pytest.approx(float(value))
    assert [r for r in caplog.messages if f"Gemma4: keep user-set swa_full_tokens_ratio={value}" in r]


def test_sglang_comes_from_the_patched_tree():
    import sglang
    from patched_tree import TREE

    assert sglang.__file__.startswith(str(TREE))
