"""0010 under generated requests: thousands of hostile requests (the generator of
gpu/checks/fuzz.py) sent in process through /generate, /v1/completions and /v1/chat/completions, up
to the scheduler. Each must be rejected with a 400 that names one of its fields, or reach the
scheduler within what the scheduler and its kernels take: every field of its declared type, token
ids inside the vocabulary, values that the int32/int64/float32 tensors built from them hold.
Anything else (a 500, an exception) fails, with the request that caused it."""

import math
import random
import re

import msgspec
import pytest
import torch
from request_pipeline import VOCAB, front_end
from session_seed import session_seed

from sglang_gemma4.gpu.checks.fuzz import request

FIXED_SEED = 20261124
RANDOM_SEED = session_seed()  # in the test id: a failure names it
# Names under which an error may name a field the client sent (the OpenAI routes rename some).
SYNONYMS = {
    "max_tokens": ["max_new_tokens", "max_completion_tokens"],
    "max_completion_tokens": ["max_new_tokens"],
    "min_tokens": ["min_new_tokens"],
    "seed": ["sampling_seed"],
    "logprobs": ["top_logprobs_num"],
    "top_logprobs": ["top_logprobs_num"],
    "prompt": ["input", "text", "input_ids"],
    "text": ["input"],
    "messages": ["input"],
    "input_ids": ["input"],
}
NOT_CULPRITS = {"model", "stream"}  # always valid in generated requests


def fits(value, dtype) -> bool:
    try:
        torch.tensor([value], dtype=dtype)
    except (RuntimeError, OverflowError, TypeError):
        return False
    return True


def valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def within_kernel_limits(tokenized) -> list[str]:
    """What breaks the scheduler or its kernels in a request it received (empty: nothing)."""
    from sglang.srt.managers.io_struct import msgpack_decode, msgpack_encode

    # Every field of its declared type: what the typed msgpack channel to the scheduler
    # (SGLANG_USE_PICKLE_IPC=0) decodes. The pickled fields are the server's own (sglang 0.5.23 has
    # no mm_data_mooncake).
    pickled = {"time_stats", "mm_inputs", "mm_data_mooncake"} & set(
        type(tokenized).__struct_fields__
    )
    plain = msgspec.structs.replace(tokenized, **dict.fromkeys(pickled))
    seen = msgpack_decode(msgpack_encode(plain))
    sp = seen.sampling_params
    ids = torch.tensor(seen.input_ids, dtype=torch.int64)
    floats = torch.tensor(
        [
            sp.temperature,
            sp.top_p,
            sp.min_p,
            sp.frequency_penalty,
            sp.presence_penalty,
            sp.repetition_penalty,
        ],
        dtype=torch.float32,
    )
    problems = {
        "input_ids outside the vocabulary": len(ids) == 0 or ids.min() < 0 or ids.max() >= VOCAB,
        "a sampling float that float32 does not hold": not floats.isfinite().all(),
        "temperature < 0, or top_p/min_p outside [0, 1]": not (
            sp.temperature >= 0 and 0 < sp.top_p <= 1 and 0 <= sp.min_p <= 1
        ),
        "top_k outside int32": not (sp.top_k >= 1 and fits(sp.top_k, torch.int32)),
        "min_new_tokens outside int32": not (
            sp.min_new_tokens >= 0 and fits(sp.min_new_tokens, torch.int32)
        ),
        "max_new_tokens outside int32": sp.max_new_tokens is not None
        and not (sp.max_new_tokens >= 0 and fits(sp.max_new_tokens, torch.int32)),
        "sampling_seed outside int64": sp.sampling_seed is not None
        and not fits(sp.sampling_seed, torch.int64),
        "a stop token outside the vocabulary": any(
            not 0 <= t < VOCAB for t in sp.stop_token_ids or ()
        ),
        "a stop string that is not valid Unicode": not all(map(valid_unicode, sp.stop_strs)),
        "stream_interval < 1": sp.stream_interval is not None and sp.stream_interval < 1,
        "top_logprobs_num outside [0, vocab]": not 0 <= seen.top_logprobs_num <= VOCAB,
        "logprob_start_len outside int32": not (
            seen.logprob_start_len == -1
            or (seen.logprob_start_len >= 0 and fits(seen.logprob_start_len, torch.int32))
        ),
        "a logprob token outside the vocabulary": any(
            not 0 <= t < VOCAB for t in seen.token_ids_logprob or ()
        ),
    }
    if sp.logit_bias:
        keys = [int(k) for k in sp.logit_bias]
        bias = torch.tensor(list(sp.logit_bias.values()), dtype=torch.float32)
        problems["a logit_bias key outside the vocabulary"] = any(not 0 <= k < VOCAB for k in keys)
        problems["a logit_bias of NaN or +inf in float32"] = bool(
            bias.isnan().any() or (bias == math.inf).any()
        )
        # a temperature below 1 scales a larger one past float32: a NaN probability row
        problems["a finite logit_bias beyond [-100, 100]"] = bool(
            (bias.isfinite() & (bias.abs() > 100)).any()
        )
        problems["a -inf logit_bias on every token"] = (
            len({k for k, b in zip(keys, bias.tolist()) if b == -math.inf}) >= VOCAB
        )
    problems["a repetition_penalty below 0.01 (divides logits past float32)"] = (
        not sp.repetition_penalty >= 0.01
    )
    return [name for name, broken in problems.items() if broken]


def field_names(payload: dict) -> set[str]:
    params = payload.get("sampling_params")
    sampling = [
        p for p in (params if isinstance(params, list) else [params]) if isinstance(p, dict)
    ]
    names = {str(k) for d in [payload, *sampling] for k in d} - NOT_CULPRITS
    return names | {synonym for name in names for synonym in SYNONYMS.get(name, [])}


def names_a_field(message: str, payload: dict) -> bool:
    return any(re.search(rf"\b{re.escape(name)}\b", message, re.I) for name in field_names(payload))


def fuzz(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    failures = []
    for i in range(count):
        endpoint, payload = request(rng, VOCAB)
        answer = front_end().post(endpoint, payload)
        if answer.status == 200:
            broken = [
                problem for tokenized in answer.sent for problem in within_kernel_limits(tokenized)
            ]
            if not answer.sent or broken:
                failures.append(
                    f"#{i} {endpoint} accepted {broken or 'but never reached the scheduler'}: "
                    f"{payload!r:.300}"
                )
        elif answer.status != 400 or not names_a_field(answer.message, payload):
            failures.append(
                f"#{i} {endpoint} answered {answer.status} {answer.message!r:.200}: "
                f"{payload!r:.300}"
            )
    return failures


@pytest.mark.parametrize(
    "seed, count",
    [(FIXED_SEED, 5000), (RANDOM_SEED, 1000)],
    ids=[f"fixed-seed-{FIXED_SEED}", f"random-seed-{RANDOM_SEED}"],
)
def test_every_generated_request_is_rejected_naming_a_field_or_within_the_kernels_limits(
    seed, count
):
    print(f"fuzz seed {seed}: {count} requests")
    failures = fuzz(seed, count)
    assert not failures, f"seed {seed}: {len(failures)} of {count} requests:\n" + "\n".join(
        failures[:10]
    )


def test_the_generator_reaches_both_outcomes_on_every_endpoint():
    rng = random.Random(FIXED_SEED)
    outcomes = set()
    for _ in range(300):
        endpoint, payload = request(rng, VOCAB)
        outcomes.add((endpoint, front_end().post(endpoint, payload).status))
    assert outcomes == {
        (e, s) for e in ("/generate", "/v1/completions", "/v1/chat/completions") for s in (200, 400)
    }
