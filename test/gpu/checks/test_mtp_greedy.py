"""The MTP greedy check's pure parts: the target's permuted head and the constructed draft
(transformers' own Gemma-4 classes at a tiny width), the token comparison, the accept length the
construction predicts, the server-log reading and the verdict."""

import json

import pytest
import torch
from transformers.models.gemma4_assistant.configuration_gemma4_assistant import (
    Gemma4AssistantConfig,
)
from transformers.models.gemma4_assistant.modeling_gemma4_assistant import (
    Gemma4AssistantForCausalLM,
)

from sglang_gemma4.gpu.checks import mtp_greedy
from sglang_gemma4.gpu.serve.checkpoint import (
    hf_model,
    init_random_,
    ordinary_ids,
    reduced_text_config,
)
from sglang_gemma4.gpu.serve.variants import assistant_text_config

VOCAB = 2048
TINY = {
    "vocab_size": VOCAB,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_global_key_value_heads": 1,
    "head_dim": 16,
    "global_head_dim": 32,
    "intermediate_size": 128,
    "sliding_window": 16,
}


@pytest.fixture(scope="module")
def target():
    """A tiny random-weight 31B-patterned target with the permuted, untied LM head."""
    text = {
        **reduced_text_config("31b", 4),
        **TINY,
        "hidden_size": 64,
        "tie_word_embeddings": False,
    }
    model = hf_model(text, "causal").float().eval()
    init_random_(model, 0)
    succ = mtp_greedy.successor(VOCAB, 0)
    with torch.no_grad():
        model.lm_head.weight.copy_(mtp_greedy.permuted_head(model.model.embed_tokens.weight, succ))
    return model, succ


def test_successor_permutes_the_ordinary_ids_and_keeps_the_specials():
    succ = mtp_greedy.successor(VOCAB, 0)
    ordinary = ordinary_ids(VOCAB)
    assert sorted(succ[:ordinary].tolist()) == list(range(ordinary))
    assert succ[ordinary:].tolist() == list(range(ordinary, VOCAB))
    assert not torch.equal(succ, mtp_greedy.successor(VOCAB, 1))


def test_the_draft_knows_about_the_chosen_share_of_the_ordinary_ids():
    knows = mtp_greedy.draft_knows(VOCAB, 0.7, 1)
    assert abs(knows[: ordinary_ids(VOCAB)].float().mean().item() - 0.7) < 0.05
    assert not knows[ordinary_ids(VOCAB) :].any()


def test_the_permuted_head_makes_the_random_target_walk_its_successor_map(target):
    model, succ = target
    prompt = torch.randint(
        0, ordinary_ids(VOCAB), (1, 40), generator=torch.Generator().manual_seed(3)
    )
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=30, do_sample=False)[0].tolist()
    generated = out[39:]  # the last prompt token, then what the target chose after it
    assert mtp_greedy.follows([generated], succ) == 1.0
    assert len(set(generated)) == len(generated)  # not one repeated token, as with the tied head


def test_the_constructed_draft_proposes_the_successor_of_known_tokens_only(target):
    model, succ = target
    knows = mtp_greedy.draft_knows(VOCAB, 0.7, 1)
    text = {**assistant_text_config("31b"), **TINY, "hidden_size": 32}
    draft = (
        Gemma4AssistantForCausalLM(Gemma4AssistantConfig(text_config=text, backbone_hidden_size=64))
        .float()
        .eval()
    )
    init_random_(draft, 2)
    embedding = model.model.embed_tokens.weight.detach()
    mtp_greedy.make_draft_agree_(draft, embedding, succ, knows)
    tokens = torch.arange(ordinary_ids(VOCAB))
    g = torch.Generator().manual_seed(4)
    # what sglang feeds it: the target's scaled embedding of the token and a recurrent state (here
    # random, as is the target KV it attends to)
    inputs = torch.cat([embedding[tokens] * 8.0, torch.randn(len(tokens), 64, generator=g)], -1)[
        :, None
    ]
    kv = {
        kind: (
            torch.randn(len(tokens), 1, 10, dim, generator=g),
            torch.randn(len(tokens), 1, 10, dim, generator=g),
        )
        for kind, dim in (("full_attention", 32), ("sliding_attention", 16))
    }
    with torch.no_grad():
        logits = draft(
            inputs_embeds=inputs, shared_kv_states=kv, position_ids=torch.full((len(tokens), 1), 9)
        ).logits
    right = logits[:, -1].argmax(-1) == succ[tokens]
    assert right[knows[tokens]].float().mean() > 0.9  # 32 wide here; the served draft is 1024 wide
    assert right[~knows[tokens]].float().mean() < 0.01
    assert (
        draft.lm_head.weight.data_ptr() == draft.model.embed_tokens.weight.data_ptr()
    )  # saved as one tensor


def test_read_tensor_finds_the_shard_that_holds_it(tmp_path):
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(2)}, tmp_path / "model-1.safetensors")
    save_file({"model.embed_tokens.weight": torch.ones(3, 2)}, tmp_path / "model-2.safetensors")
    assert torch.equal(
        mtp_greedy.read_tensor(tmp_path, "model.embed_tokens.weight"), torch.ones(3, 2)
    )
    with pytest.raises(KeyError):
        mtp_greedy.read_tensor(tmp_path, "lm_head.weight")


def test_the_predicted_accept_length_matches_the_construction():
    succ, knows = mtp_greedy.successor(VOCAB, 0), mtp_greedy.draft_knows(VOCAB, 0.7, 1)
    walk = [5]
    for _ in range(20000):
        walk.append(int(succ[walk[-1]]))
    predicted = mtp_greedy.predicted_accept_length([walk], succ, knows)
    assert abs(predicted - mtp_greedy.expected_accept_length(0.7)) < 0.1
    low, high = mtp_greedy.ACCEPT_RANGE
    assert low < mtp_greedy.expected_accept_length(mtp_greedy.DRAFT_AGREEMENT) < high


def test_accept_length_steps_by_hand():
    succ = torch.arange(1, 11) % 10  # x -> x + 1
    knows = torch.tensor([True, True, False, True, True, True, True, False, False, False])
    # bonus 0: drafts 1, 2 right (0, 1 known), 3 wrong (2 unknown) -> 3 tokens; bonus 3: 4, 5, 6
    # right -> 4; bonus 7: unknown -> 1; bonus 8: 1 (9 is the last token)
    assert mtp_greedy.predicted_accept_length([list(range(10))], succ, knows) == 9 / 4
    assert (
        mtp_greedy.expected_accept_length(0.0) == 1.0
        and mtp_greedy.expected_accept_length(1.0) == 4.0
    )


def test_first_divergence_names_request_and_position():
    same = [[1, 2, 3], [4, 5]]
    assert mtp_greedy.first_divergence(same, [[1, 2, 3], [4, 5]]) is None
    assert mtp_greedy.first_divergence(same, [[1, 2, 3], [4, 6]]) == (1, 1)
    assert mtp_greedy.first_divergence(same, [[1, 2], [4, 6]]) == (0, 2)  # a missing token counts
    assert mtp_greedy.first_divergence(same, [[1, 2, 3, 9], [4, 5]]) == (
        0,
        3,
    )  # so does an extra one
    with pytest.raises(ValueError):
        mtp_greedy.first_divergence(same, [[1, 2, 3]])


def test_served_stats_read_the_accept_length_and_the_swa_pool_from_the_log():
    log = "\n".join(
        [
            "[2026-11-25 10:00:00] Prefill batch, #new-seq: 8, #new-token: 8192, #cached-token: 0, "
            "full token usage: 0.30, swa token usage: 0.99, #running-req: 0, #queue-req: 32",
            "[2026-11-25 10:00:01] Decode batch, #running-req: 8, #full token: 9000, "
            "full token usage: 0.27, "
            "#swa token: 8100, swa token usage: 0.98, accept len: 2.40, accept rate: "
            "0.47, cuda graph: False, "
            "gen throughput (token/s): 900.00, #queue-req: 32",
            "[2026-11-25 10:00:02] Decode batch, #running-req: 4, #full token: 5000, "
            "full token usage: 0.15, "
            "#swa token: 4100, swa token usage: 0.50, accept len: 2.60, accept rate: "
            "0.53, cuda graph: True, "
            "gen throughput (token/s): 700.00, #queue-req: 0",
            (
                "[2026-11-25 10:00:03] KV cache pool is full. Retract requests. "
                "#retracted_reqs: 2, #new_token_ratio: 0.5"
            ),
        ]
    )
    assert mtp_greedy.served_stats(log) == {
        "accept_len": 2.5,
        "peak_swa_token_usage": 0.99,
        "retracted_reqs": 2,
    }
    assert mtp_greedy.served_stats(log.replace("accept len", "other"))["accept_len"] is None


def row(**changes) -> dict:
    good = {
        "variant": "31b",
        "requests": 40,
        "tokens_compared": 10240,
        "divergence": None,
        "accept_len": 2.5,
        "predicted_accept_len": 2.53,
        "peak_swa_token_usage_off": 0.99,
        "peak_swa_token_usage": 0.98,
        "retracted_reqs_off": 0,
        "retracted_reqs": 1,
    }
    return {**good, **changes}


@pytest.mark.parametrize(
    "changes, passed",
    [
        ({}, True),
        ({"divergence": (3, 17)}, False),
        ({"accept_len": 3.9}, False),
        ({"accept_len": 1.2}, False),
        ({"accept_len": None}, False),
        ({"tokens_compared": 0}, False),
    ],
)
def test_verdict_needs_every_token_and_a_partial_accept_length(changes, passed):
    assert mtp_greedy.verdict(row(**changes)) is passed


def test_the_table_names_the_divergence_and_the_errors():
    report = mtp_greedy.table(
        [row(divergence=(3, 17)), {"variant": "26b-a4b", "error": "RuntimeError: died"}]
    )
    lines = report.splitlines()
    assert "| 31b | 40 | 10240 | (3, 17) | 2.5; 2.53 | 0.99; 0.98 | 0; 1 | NO |" in lines
    assert "| 26b-a4b | - | - | error: RuntimeError: died | - | - | - | NO |" in lines
    json.dumps(row())  # rows go to mtp-greedy.jsonl as they are


def test_a_server_that_died_names_the_error_its_log_ends_with(tmp_path):
    import subprocess
    import sys

    from sglang_gemma4.gpu.serve.server import Server

    log = tmp_path / "31b-mtp-off.log"
    log.write_text(
        "[2026-11-25 04:54:01] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "scheduler.py", line 3972, in on_idle\n'
        "ValueError: pool memory leak detected! [full] total=32768, available=634, "
        "evictable=32134\n"
        "[swa] total=8192, available=602, evictable=7053\n"
        "[2026-11-25 04:54:06] kill_process_tree called: parent_pid=4527, include_parent=True\n"
    )
    server = Server("31b", "patched", log)
    assert server.death() is None  # never started
    server.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert server.death() is None  # still running
    finally:
        server.process.kill()
        server.process.wait()
    assert server.death() == (
        "ValueError: pool memory leak detected! [full] total=32768, available=634, evictable=32134"
    )
    log.write_text("[2026-11-25 04:54:06] kill_process_tree called\n")
    assert server.death().startswith("exited (-9) with no error")


def test_both_servers_run_with_the_given_environment(tmp_path):
    # an opt-in switch (e.g. 0175's verify kernel) must reach the server without MTP and the one
    # with it
    off, on = mtp_greedy.servers(
        "31b", tmp_path / "t", tmp_path / "d", tmp_path, {"SGLANG_OPT_X": "1"}
    )
    assert off.env == on.env == {"SGLANG_OPT_X": "1"} and not off.mtp and on.mtp
    assert "SGLANG_OPT_X=1" in on.describe()


def test_both_servers_share_the_static_kv_split_that_mtp_serves_with(tmp_path):
    """26B-A4B's preset serves without MTP on the unified pool and with MTP on the split: the
    greedy comparison keeps the pool's layout (and KV_FLAGS' meaning) the same on both sides."""
    for server in mtp_greedy.servers("26b-a4b", tmp_path / "t", tmp_path / "d", tmp_path):
        assert "--enable-unified-memory" not in server.describe()
        assert "--swa-full-tokens-ratio 0.25" in server.describe()
