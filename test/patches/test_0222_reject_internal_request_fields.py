"""0222: the GenerateReqInput fields the server fills in for itself (embedding overrides, scoring
delimiters, the multi-tokenizer IPC name, timestamps, lora_id, EPD multimodal bookkeeping) are
refused with HTTP 400 when a client sets them in /generate, instead of reaching the scheduler with
values no check covers; extra_key (and the OpenAI routes' cache_salt) must be a string, one per
prompt in a batch: a list on a single prompt reached the scheduler's radix cache, and a list on the
OpenAI routes was a TypeError answered with 500. Sent in process through sglang's request path."""

import pytest
from request_pipeline import front_end

GENERATE, COMPLETIONS, CHAT = "/generate", "/v1/completions", "/v1/chat/completions"


def generate(**fields):
    return {"text": "hi", "sampling_params": {"max_new_tokens": 4}, **fields}


def status_and_message(endpoint, payload):
    answer = front_end().post(endpoint, payload)
    return answer.status, answer.message


@pytest.mark.parametrize(
    "field, value",
    [
        ("positional_embed_overrides", {"positions": [0], "embeds": [[1.0]]}),
        ("positional_embed_overrides", [1, 2, 3]),
        ("multi_item_delimiter_indices", [0, 1]),
        ("http_worker_ipc", "ipc:///tmp/elsewhere"),
        ("received_time", 1.0),
        ("external_trace_header", {"traceparent": "00-x"}),
        ("lora_id", "some-adapter-id"),
        ("return_bytes", True),
        ("need_wait_for_mm_inputs", True),
        ("num_items_assigned", {}),
        ("encoder_urls", ["http://127.0.0.1:1/"]),
    ],
)
def test_an_internal_field_set_by_a_client_is_a_400_naming_it(field, value):
    status, message = status_and_message(GENERATE, generate(**{field: value}))
    assert status == 400, message
    assert message.startswith(f"{field} is set by the server, not a client"), message


@pytest.mark.parametrize(
    "payload, fragment",
    [
        (generate(extra_key=["a", "b"]), "extra_key must not be a list for a single prompt"),
        ({"text": ["a", "b"], "extra_key": ["x"]}, "extra_key must have one entry per prompt (2)"),
    ],
)
def test_extra_key_that_the_radix_cache_cannot_hash_is_a_400(payload, fragment):
    status, message = status_and_message(GENERATE, payload)
    assert status == 400 and fragment in message, (status, message)


@pytest.mark.parametrize(
    "endpoint, payload",
    [
        (COMPLETIONS, {"prompt": "hi", "max_tokens": 2, "cache_salt": ["a", "b"]}),
        (
            CHAT,
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "extra_key": ["a"]},
        ),
    ],
)
def test_a_list_salt_on_an_openai_route_is_a_400_not_a_500(endpoint, payload):
    status, message = status_and_message(endpoint, payload)
    field = "cache_salt" if "cache_salt" in payload else "extra_key"
    # the message names the field (sglang 0.5.18 refuses it in the request's normalization)
    assert status == 400 and field in message, (status, message)


@pytest.mark.parametrize(
    "endpoint, payload",
    [
        (GENERATE, generate(extra_key="tenant-a")),
        (GENERATE, {"text": ["a", "b"], "extra_key": ["x", "y"]}),
        (GENERATE, generate(return_bytes=False, lora_id=None)),  # the defaults
        (COMPLETIONS, {"prompt": "hi", "max_tokens": 2, "cache_salt": "a", "extra_key": "b"}),
    ],
)
def test_client_fields_still_pass(endpoint, payload):
    status, message = status_and_message(endpoint, payload)
    assert status == 200, message


@pytest.mark.parametrize(
    "endpoint, payload",
    [
        (GENERATE, generate(rid="HEALTH_CHECK_1")),
        (GENERATE, {"text": ["a", "b"], "rid": ["x", "HEALTH_CHECK_x"]}),
        (COMPLETIONS, {"prompt": "hi", "max_tokens": 2, "rid": "HEALTH_CHECK_2"}),
        (
            CHAT,
            {
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
                "rid": "HEALTH_CHECK_3",
            },
        ),
    ],
)
def test_a_client_rid_in_the_health_checks_namespace_is_a_400(endpoint, payload):
    # the scheduler drops a health check while it is busy: such a client would wait forever
    status, message = status_and_message(endpoint, payload)
    assert status == 400 and "rid must not start with 'HEALTH_CHECK'" in message, (status, message)
