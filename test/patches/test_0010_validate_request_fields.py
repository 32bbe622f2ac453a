"""0010: every sampling, logprob and stop field of /generate, /v1/completions and
/v1/chat/completions is checked for its JSON type, its range, the sizes the scheduler's tensors
hold, token ids inside the vocabulary and valid Unicode, before the request reaches the scheduler: a
request that breaks a rule is answered with HTTP 400 naming the field and the rule. Sent in process
through sglang's request path (request_pipeline.py), as a client sends them."""

import contextlib
import math

import pytest
from request_pipeline import VOCAB, front_end

GENERATE, COMPLETIONS, CHAT = "/generate", "/v1/completions", "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def generate(**sampling):
    return {"text": "hi", "sampling_params": {"max_new_tokens": 4, **sampling}}


def rejected(endpoint: str, payload: dict, *fragments: str) -> None:
    answer = front_end().post(endpoint, payload)
    assert answer.status == 400, f"{answer.status} {answer.message!r}"
    assert all(fragment in answer.message for fragment in fragments), answer.message


def accepted(endpoint: str, payload: dict) -> None:
    answer = front_end().post(endpoint, payload)
    assert answer.status == 200 and answer.sent, f"{answer.status} {answer.message!r}"


@pytest.mark.parametrize(
    "params, field, rule",
    [
        # a float or a string where an integer is expected
        ({"top_k": 5.5}, "sampling_params.top_k", "must be an integer in [1, 2147483647] or -1"),
        (
            {"max_new_tokens": "16"},
            "sampling_params.max_new_tokens",
            "must be an integer in [0, 2147483647]",
        ),
        ({"max_new_tokens": 16.0}, "sampling_params.max_new_tokens", "must be an integer"),
        ({"min_new_tokens": 2.5}, "sampling_params.min_new_tokens", "must be an integer"),
        ({"n": 2.0}, "sampling_params.n", "must be an integer in [1, 1024]"),
        ({"n": None}, "sampling_params.n", "must be an integer"),
        (
            {"stream_interval": "a"},
            "sampling_params.stream_interval",
            "must be an integer in [1, 2147483647]",
        ),
        ({"sampling_seed": 1.5}, "sampling_params.sampling_seed", "must be an integer"),
        # a string or a boolean where a number is expected
        ({"temperature": "0.7"}, "sampling_params.temperature", "must be a number in [0, 3.4e38]"),
        ({"temperature": True}, "sampling_params.temperature", "must be a number"),
        ({"top_p": "1"}, "sampling_params.top_p", "must be a number in (0, 1]"),
        ({"min_p": [0.1]}, "sampling_params.min_p", "must be a number in [0, 1]"),
        (
            {"frequency_penalty": "0.5"},
            "sampling_params.frequency_penalty",
            "must be a number in [-2, 2]",
        ),
        (
            {"presence_penalty": {}},
            "sampling_params.presence_penalty",
            "must be a number in [-2, 2]",
        ),
        (
            {"repetition_penalty": "1"},
            "sampling_params.repetition_penalty",
            "must be a number in [0.01, 2]",
        ),
        # a vanishing penalty divides a logit past float32
        (
            {"repetition_penalty": 1e-30},
            "sampling_params.repetition_penalty",
            "must be a number in [0.01, 2]",
        ),
        ({"ignore_eos": 1}, "sampling_params.ignore_eos", "must be true or false"),
        (
            {"skip_special_tokens": "false"},
            "sampling_params.skip_special_tokens",
            "must be true or false",
        ),
        (
            {"spaces_between_special_tokens": 0},
            "sampling_params.spaces_between_special_tokens",
            "must be true or false",
        ),
        ({"no_stop_trim": "yes"}, "sampling_params.no_stop_trim", "must be true or false"),
        ({"json_schema": {"type": "object"}}, "sampling_params.json_schema", "must be a string"),
        ({"regex": 5}, "sampling_params.regex", "must be a string"),
        # beyond what the scheduler's int32/int64/float32 tensors hold
        ({"top_k": 2**31}, "sampling_params.top_k", "[1, 2147483647]"),
        ({"max_new_tokens": 2**31}, "sampling_params.max_new_tokens", "[0, 2147483647]"),
        ({"min_new_tokens": 2**31}, "sampling_params.min_new_tokens", "[0, 2147483647]"),
        (
            {"sampling_seed": 2**63},
            "sampling_params.sampling_seed",
            "[-9223372036854775808, 9223372036854775807]",
        ),
        ({"temperature": 1e39}, "sampling_params.temperature", "(float32)"),
        ({"temperature": math.inf}, "sampling_params.temperature", "(float32)"),
        ({"top_p": math.nan}, "sampling_params.top_p", "(0, 1]"),
        # counts that cannot work
        ({"stream_interval": 0}, "sampling_params.stream_interval", "[1, 2147483647]"),
        ({"n": 0}, "sampling_params.n", "[1, 1024]"),
        ({"n": 1025}, "sampling_params.n", "[1, 1024]"),
        ({"top_k": 0}, "sampling_params.top_k", "or -1"),
        # stop token ids outside the vocabulary, or more of them than it has
        (
            {"stop_token_ids": [2, VOCAB]},
            "sampling_params.stop_token_ids[1]",
            f"must be a token id in [0, {VOCAB})",
        ),
        ({"stop_token_ids": [-1]}, "sampling_params.stop_token_ids[0]", "must be a token id"),
        ({"stop_token_ids": ["1"]}, "sampling_params.stop_token_ids[0]", "must be a token id"),
        ({"stop_token_ids": 5}, "sampling_params.stop_token_ids", "must be a list of token ids"),
        (
            {"stop_token_ids": [1] * (VOCAB + 1)},
            "sampling_params.stop_token_ids",
            f"at most {VOCAB} ids",
        ),
        # stop strings and patterns
        (
            {"stop": ["ok", "\ud800"]},
            "sampling_params.stop[1]",
            "must be valid Unicode (lone surrogate at index 0)",
        ),
        ({"stop": 5}, "sampling_params.stop", "must be a string or a list of strings"),
        ({"stop_regex": "("}, "sampling_params.stop_regex", "must be a valid regular expression"),
        (
            {"stop_regex": ["a", "(?<=a+)b"]},
            "sampling_params.stop_regex[1]",
            "must be a valid regular expression",
        ),
        (
            {"stop_regex": "(a{4000000000}){4000000000}"},
            "sampling_params.stop_regex",
            "must match at most",
        ),
        # fields SamplingParams takes but a client must not set
        ({"bogus": 1}, "sampling_params['bogus']", "is not a sampling parameter"),
        ({"temprature": 0.5}, "sampling_params['temprature']", "is not a sampling parameter"),
        (
            {"is_normalized": True},
            "sampling_params['is_normalized']",
            "is not a sampling parameter",
        ),
        ({"stop_strs": ["x"]}, "sampling_params['stop_strs']", "is not a sampling parameter"),
        # custom_params in the shape SamplingParams declares
        (
            {"custom_params": {"k": {"deep": {"er": 1}}}},
            "sampling_params.custom_params['k']['deep']",
            "must be null",
        ),
        ({"custom_params": {"k": 2**64}}, "sampling_params.custom_params['k']", "int64"),
        ({"custom_params": "x"}, "sampling_params.custom_params", "must be an object"),
    ],
)
def test_sampling_field_that_breaks_its_rule_is_a_400_naming_it(params, field, rule):
    rejected(GENERATE, generate(**params), field, rule)


@pytest.mark.parametrize(
    "bias", [math.nan, math.inf, 1e39, 3.4e38, 100.5, -1e30, "5", None, True, [1.0]]
)
def test_logit_bias_the_sampler_cannot_use_is_rejected(bias):
    # 3.4e38 holds in float32, but a temperature of 0.7 scales it to +inf: a NaN row
    rejected(
        GENERATE,
        generate(temperature=0.7, logit_bias={"17": 1.0, "42": bias}),
        "sampling_params.logit_bias['42'] must be a number in [-100, 100], or -inf",
    )


def test_logit_bias_that_bans_every_token_is_rejected():
    banned = {str(i): -math.inf for i in range(VOCAB)}
    rejected(
        GENERATE,
        generate(logit_bias=banned),
        "sampling_params.logit_bias must leave at least one token not banned with -inf",
    )
    del banned["5"]
    accepted(GENERATE, generate(logit_bias=banned))


@pytest.mark.parametrize("logit_bias", [[["17", 1.0]], "17:1.0"])
def test_logit_bias_that_is_not_a_mapping_is_rejected(logit_bias):
    rejected(
        GENERATE,
        generate(logit_bias=logit_bias),
        "sampling_params.logit_bias must map token ids to biases",
    )


@pytest.mark.parametrize("key", [str(VOCAB), "-1", "abc", "1.5"])
def test_logit_bias_key_that_is_not_a_token_id_is_rejected(key):
    rejected(
        GENERATE, generate(logit_bias={key: 1.0}), f"must be keyed by a token id in [0, {VOCAB})"
    )


@pytest.mark.parametrize("bias", [-math.inf, -100, 0, 2.5, 100])
def test_usable_biases_pass(bias):
    accepted(
        GENERATE, generate(temperature=0.7, logit_bias={"17": bias, "0": 1})
    )  # -inf bans a token


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 7, -1, -(2**31)])
def test_input_id_outside_the_vocabulary_is_rejected(bad):
    rejected(
        GENERATE,
        {"input_ids": [2, 10, bad, 11], "sampling_params": {"max_new_tokens": 1}},
        f"input_ids[2] must be a token id in [0, {VOCAB}), got {bad}",
    )


@pytest.mark.parametrize(
    "ids, field",
    [
        ([[1, 2], [3, -4]], "input_ids[1][1]"),
        ([[VOCAB], [1]], "input_ids[0][0]"),
        ([[1], []], "input_ids[1] must not be empty"),
    ],
)
def test_a_batch_of_input_ids_is_checked_per_sequence(ids, field):
    rejected(GENERATE, {"input_ids": ids}, field)


@pytest.mark.parametrize("ids", [[0], [2, 5, VOCAB - 1], [[1, 2], [3, VOCAB - 1]]])
def test_input_ids_inside_the_vocabulary_pass(ids):
    accepted(GENERATE, {"input_ids": ids, "sampling_params": {"max_new_tokens": 1}})


@pytest.mark.parametrize("top", [VOCAB + 1, 10**6, -1])
def test_more_top_logprobs_than_the_vocabulary_is_rejected(top):
    rejected(
        GENERATE,
        {**generate(), "return_logprob": True, "top_logprobs_num": top},
        "top_logprobs_num (OpenAI: top_logprobs, or logprobs in /v1/completions) must be an "
        "integer in "
        f"[0, {VOCAB}], got {top}",
    )


def test_top_logprobs_beyond_the_vocabulary_is_rejected_even_without_logprobs():
    rejected(
        GENERATE,
        {**generate(), "return_logprob": False, "top_logprobs_num": 10**6},
        "top_logprobs_num",
    )


@pytest.mark.parametrize("top", [0, 1, 20, VOCAB])
def test_top_logprobs_within_the_vocabulary_pass(top):
    accepted(GENERATE, {**generate(), "return_logprob": True, "top_logprobs_num": top})


@pytest.mark.parametrize(
    "payload, fragment",
    [
        (
            {"return_logprob": True, "token_ids_logprob": [5, VOCAB]},
            f"token_ids_logprob[1] must be a token id in [0, {VOCAB})",
        ),
        (
            {"return_logprob": True, "token_ids_logprob": [-3]},
            "token_ids_logprob[0] must be a token id",
        ),
        (
            {"return_logprob": True, "logprob_start_len": -2},
            "logprob_start_len must be an integer in [0, 2147483647] or -1",
        ),
        (
            {"return_logprob": True, "logprob_start_len": 2**31},
            "logprob_start_len must be an integer",
        ),
        ({"return_logprob": [True]}, "return_logprob must not be a list for a single prompt"),
        (
            {"text": ["a", "b"], "sampling_params": [{}, {}, {}]},
            "sampling_params must have one entry per prompt (2)",
        ),
        (
            {"text": ["a", "b"], "top_logprobs_num": [1]},
            "must have one entry per prompt (2), got [1]",
        ),
        (
            {"text": ["a", "b"], "token_ids_logprob": [[1], [VOCAB]]},
            "token_ids_logprob[1][0] must be a token id",
        ),
        (
            {"sampling_params": [{"max_new_tokens": 4}]},
            "sampling_params must not be a list for a single prompt",
        ),
        ({"text": "\ud800hi"}, "text must be valid Unicode (lone surrogate at index 0)"),
        ({"text": ["ok", "a\udfffb"]}, "text[1] must be valid Unicode (lone surrogate at index 1)"),
        ({"text": ""}, "text must not be empty"),
        ({"text": []}, "text must not be an empty list"),
        ({"text": None, "input_ids": []}, "input_ids must be a non-empty list"),
    ],
)
def test_generate_field_that_breaks_its_rule_is_a_400_naming_it(payload, fragment):
    rejected(GENERATE, {**generate(), **payload}, fragment)


@pytest.mark.parametrize(
    "endpoint, payload, fragment",
    [
        (
            CHAT,
            {"messages": MESSAGES, "max_tokens": 2**31},
            "(OpenAI: max_tokens / max_completion_tokens)",
        ),
        (
            COMPLETIONS,
            {"prompt": "hi", "max_tokens": 2**40},
            "(OpenAI: max_tokens / max_completion_tokens)",
        ),
        (CHAT, {"messages": MESSAGES, "top_k": 2**31}, "sampling_params.top_k must be an integer"),
        (
            COMPLETIONS,
            {"prompt": "hi", "seed": 2**63},
            "sampling_params.sampling_seed (OpenAI: seed)",
        ),
        (
            CHAT,
            {"messages": MESSAGES, "logprobs": True, "top_logprobs": 10**6},
            "top_logprobs_num (OpenAI: top_logprobs",
        ),
        (
            COMPLETIONS,
            {"prompt": "hi", "logprobs": -1},
            "top_logprobs_num (OpenAI: top_logprobs, or logprobs",
        ),
        (
            CHAT,
            {"messages": MESSAGES, "stop_token_ids": [VOCAB]},
            "sampling_params.stop_token_ids[0] must be a token id",
        ),
        (COMPLETIONS, {"prompt": [1, VOCAB]}, "input_ids[1] must be a token id"),
        (CHAT, {"messages": MESSAGES, "input_ids": [1, -5]}, "input_ids[1] must be a token id"),
        (
            CHAT,
            {"messages": MESSAGES, "temperature": math.nan},
            "sampling_params.temperature must be a number",
        ),
        (
            COMPLETIONS,
            {"prompt": "hi", "logit_bias": {"17": math.inf}},
            "sampling_params.logit_bias['17'] must be",
        ),
        (CHAT, {"messages": MESSAGES, "stop": ["\udc00"]}, "stop[0] must be valid Unicode"),
        (
            CHAT,
            {"messages": [{"role": "user", "content": "hi \ud83d"}]},
            "messages[0].content must be valid Unicode",
        ),
        (COMPLETIONS, {"prompt": "a\udfff"}, "prompt must be valid Unicode"),
        # n = 0 would wait forever for a choice that is never generated
        (CHAT, {"messages": MESSAGES, "n": 0}, "sampling_params.n must be an integer in [1, 1024]"),
        (
            CHAT,
            {"messages": MESSAGES, "n": -1},
            "sampling_params.n must be an integer in [1, 1024]",
        ),
        (
            COMPLETIONS,
            {"prompt": "hi", "n": 0},
            "sampling_params.n must be an integer in [1, 1024]",
        ),
        (
            COMPLETIONS,
            {"prompt": "hi", "n": -3},
            "sampling_params.n must be an integer in [1, 1024]",
        ),
    ],
)
def test_openai_field_that_breaks_its_rule_is_a_400_naming_it(endpoint, payload, fragment):
    rejected(endpoint, payload, fragment)


@pytest.mark.parametrize("endpoint", [GENERATE, COMPLETIONS, CHAT])
def test_a_streamed_request_that_breaks_a_rule_is_an_http_400_too(endpoint):
    payload = (
        {**generate(top_k=5.5), "stream": True}
        if endpoint == GENERATE
        else {"prompt": "hi", "top_k": 2**31, "stream": True}
        if endpoint == COMPLETIONS
        else {"messages": MESSAGES, "top_k": 2**31, "stream": True}
    )
    rejected(endpoint, payload, "sampling_params.top_k must be an integer")


@pytest.mark.parametrize(
    "endpoint, payload",
    [
        (
            GENERATE,
            generate(
                temperature=0,
                top_k=-1,
                top_p=1.0,
                min_p=0,
                n=1,
                stop=["\n"],
                stop_token_ids=[1],
                stop_regex="a+b",
                logit_bias={"5": -math.inf},
                sampling_seed=-(2**63),
                stream_interval=1,
                min_new_tokens=0,
                repetition_penalty=2,
                frequency_penalty=-2,
                presence_penalty=2,
                ignore_eos=True,
                skip_special_tokens=None,
                custom_params={"k": 1, "xs": [1, "a"]},
            ),
        ),
        (
            GENERATE,
            {
                "text": ["a", "b"],
                "sampling_params": [{"n": 2}, {"n": 2}],
                "return_logprob": True,
                "top_logprobs_num": VOCAB,
                "token_ids_logprob": [0, VOCAB - 1],
                "logprob_start_len": 0,
            },
        ),
        (
            GENERATE,
            {
                "text": ["a", "b"],
                "return_logprob": [True, False],
                "token_ids_logprob": [[1], [VOCAB - 1]],
                "stream": True,
            },
        ),
        (GENERATE, {"input_ids": [1, 2], "sampling_params": {"n": 1024, "max_new_tokens": 1}}),
        (
            COMPLETIONS,
            {
                "prompt": "hi",
                "max_tokens": 4,
                "n": 2,
                "seed": 2**63 - 1,
                "logprobs": 5,
                "stream": True,
            },
        ),
        (
            CHAT,
            {
                "messages": [{"role": "user", "content": "h\u00e9 \U0001f600"}],
                "max_tokens": 4,
                "top_k": 2**31 - 1,
                "logprobs": True,
                "top_logprobs": 20,
                "stop": "x",
                "logit_bias": {"17": 100},
            },
        ),
    ],
)
def test_requests_inside_every_rule_reach_the_scheduler(endpoint, payload):
    accepted(endpoint, payload)


GRAMMAR_REQUESTS = [
    (GENERATE, generate(regex="a+"), "sampling_params.regex"),
    (
        GENERATE,
        {"text": ["a", "b"], "sampling_params": [{}, {"ebnf": 'root ::= "a"'}]},
        "sampling_params[1].ebnf",
    ),
    # streamed with logprobs: the scheduler's abort reached the stream without logprob fields (HTTP
    # 500)
    (
        COMPLETIONS,
        {"prompt": "hi", "ebnf": 'root ::= "a"', "stream": True, "logprobs": 1},
        "sampling_params.ebnf",
    ),
    (
        CHAT,
        {"messages": MESSAGES, "regex": " ", "stream": True, "logprobs": True},
        "sampling_params.regex",
    ),
    (
        CHAT,
        {"messages": MESSAGES, "response_format": {"type": "json_object"}},
        "sampling_params.json_schema",
    ),
]


@contextlib.contextmanager
def grammar_backend(name: str):
    """Serve with --grammar-backend `name` (ServerArgs are read-only once resolved)."""
    args = front_end().manager.server_args
    served = args.grammar_backend
    object.__setattr__(args, "grammar_backend", name)
    try:
        yield
    finally:
        object.__setattr__(args, "grammar_backend", served)


@pytest.mark.parametrize("endpoint, payload, field", GRAMMAR_REQUESTS)
def test_constrained_decoding_without_a_grammar_backend_is_a_400_naming_the_field(
    endpoint, payload, field
):
    with grammar_backend("none"):
        rejected(
            endpoint,
            payload,
            field,
            "needs a grammar backend (this server runs with --grammar-backend none)",
        )


@pytest.mark.parametrize("endpoint, payload, field", GRAMMAR_REQUESTS)
def test_constrained_decoding_with_a_grammar_backend_reaches_the_scheduler(
    endpoint, payload, field
):
    with grammar_backend("xgrammar"):
        accepted(endpoint, payload)


def test_every_sampling_parameter_a_client_may_set_has_a_rule():
    import msgspec

    from sglang.srt.managers.request_validation import _SAMPLING_RULES
    from sglang.srt.sampling.sampling_params import SamplingParams

    set_by_normalize = {
        "stop_strs",
        "stop_regex_strs",
        "stop_str_max_len",
        "stop_regex_max_len",
        "is_normalized",
    }
    assert (
        set(_SAMPLING_RULES)
        == {f.name for f in msgspec.structs.fields(SamplingParams)} - set_by_normalize
    )
