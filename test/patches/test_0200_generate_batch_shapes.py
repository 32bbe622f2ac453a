"""0200: /generate answers a batch whose per-prompt lists do not match it, a list for a single
prompt, text and input_ids of different shapes, and session_params that SessionParams does not take
with HTTP 400 naming the field, instead of 500 (a TypeError or IndexError in normalization or in the
tokenizer manager), through sglang's HTTP app in process."""

import pytest
from http_app import http_app

BATCH = ["a", "b"]
MISMATCHED = [
    ({"text": BATCH, "rid": ["x"]}, "rid"),
    ({"text": "a", "rid": ["x", "y"]}, "rid"),
    ({"text": BATCH, "lora_path": ["x"]}, "lora_path"),
    ({"text": BATCH, "lora_id": ["x", "y", "z"]}, "lora_id"),
    ({"text": BATCH, "video_data": ["x"]}, "video_data"),
    ({"text": BATCH, "video_data": []}, "video_data"),
    ({"text": BATCH, "audio_data": ["x", "y", "z"]}, "audio_data"),
    ({"text": BATCH, "image_data": ["x"]}, "image_data"),
    ({"text": BATCH, "bootstrap_room": [1]}, "bootstrap_room"),
    ({"text": BATCH, "bootstrap_host": ["h"]}, "bootstrap_host"),
    ({"text": BATCH, "bootstrap_port": [1, 2, 3]}, "bootstrap_port"),
    ({"text": BATCH, "bootstrap_pair_key": ["k"]}, "bootstrap_pair_key"),
    ({"text": BATCH, "decode_tp_size": [1]}, "decode_tp_size"),
    ({"text": BATCH, "custom_logit_processor": ["x"]}, "custom_logit_processor"),
    ({"text": BATCH, "extra_key": ["x"]}, "extra_key"),
    ({"text": BATCH, "return_sampling_mask": [True]}, "return_sampling_mask"),
    ({"input_ids": [[5], [6]], "rid": ["x", "y", "z"]}, "rid"),
    ({"text": "a", "lora_path": ["x"]}, "lora_path"),
    ({"text": "a", "custom_logit_processor": ["x", "y"]}, "custom_logit_processor"),
    ({"text": "a", "extra_key": ["x"]}, "extra_key"),
    ({"text": BATCH, "input_ids": [[1]]}, "input_ids"),
    ({"text": "a", "input_ids": [[1], [2]]}, "input_ids"),
    ({"text": BATCH, "input_ids": [1, 2]}, "input_ids"),
    ({"text": "a", "session_params": {"id": "s", "bogus": 1}}, "session_params"),
    ({"text": "a", "session_params": {"id": 5}}, "session_params.id"),
    ({"text": "a", "session_params": {"id": "s", "offset": "x"}}, "session_params.offset"),
    ({"text": "a", "session_params": {"id": "s", "offset": -3}}, "session_params.offset"),
    ({"text": "a", "session_params": {"id": "s", "replace": "yes"}}, "session_params.replace"),
    ({"text": "a", "session_params": {"rid": ["r"]}}, "session_params.rid"),
]


@pytest.mark.parametrize(
    "body, field", MISMATCHED, ids=[f"{f}-{i}" for i, (_, f) in enumerate(MISMATCHED)]
)
def test_a_batch_shape_or_session_mismatch_is_a_400_naming_the_field(body, field):
    reply = http_app().post("/generate", {**body, "sampling_params": {"max_new_tokens": 4}})
    assert reply.status == 400, reply
    assert field in reply.json()["error"]["message"], reply


MATCHED = [
    {"text": BATCH, "rid": ["x1", "y1"], "lora_path": None},
    {"text": BATCH, "rid": "p", "bootstrap_room": [1, 2], "custom_logit_processor": [None, None]},
    {"text": BATCH, "image_data": [], "extra_key": ["k", "l"]},
    {"input_ids": [[5], [6]], "rid": ["x2", "y2"], "return_sampling_mask": [False, True]},
    {"text": "a", "rid": "single", "bootstrap_room": 7, "extra_key": "k"},
    {"text": "a", "input_ids": [5, 6]},
    {"text": BATCH, "input_ids": [[5], [6]]},
    {
        "text": "a",
        "session_params": {
            "id": "s",
            "rid": None,
            "offset": 0,
            "replace": False,
            "drop_previous_output": None,
        },
    },
    {"text": BATCH, "sampling_params": {"n": 2, "max_new_tokens": 4}, "rid": ["x3", "y3"]},
    # input_ids sent with text, indexed per sample like it
    {"text": BATCH, "input_ids": [[1], [2]], "sampling_params": {"n": 2, "max_new_tokens": 4}},
]


@pytest.mark.parametrize("body", MATCHED, ids=range(len(MATCHED)))
def test_a_batch_of_matching_shape_reaches_the_scheduler(body):
    reply = http_app().post("/generate", {"sampling_params": {"max_new_tokens": 4}, **body})
    assert reply.status == 200 and reply.dispatched, reply


MORE = [
    ("/generate", {"input_embeds": [], "sampling_params": {"max_new_tokens": 4}}, "input_embeds"),
    (
        "/generate",
        {"input_embeds": [[]], "sampling_params": {"max_new_tokens": 4}},
        "input_embeds[0]",
    ),
    (
        "/generate",
        {"text": "a", "video_data": [], "sampling_params": {"n": 2, "max_new_tokens": 4}},
        "video_data",
    ),
    (
        "/generate",
        {"text": "a", "audio_data": ["x", "y"], "sampling_params": {"n": 2, "max_new_tokens": 4}},
        "audio_data",
    ),
    # EmbeddingReqInput (/classify, /encode) normalizes its batch on its own
    ("/classify", {"text": BATCH, "rid": "r"}, "rid"),
    ("/classify", {"text": ["a"], "rid": ["a", "b", "c"]}, "rid"),
    ("/classify", {"text": "a", "rid": ["a", "b"]}, "rid"),
    ("/classify", {"text": BATCH, "image_data": "x"}, "image_data"),
    ("/classify", {"text": BATCH, "sampling_params": [{}]}, "sampling_params"),
    ("/classify", {"input_ids": []}, "input_ids"),
]


@pytest.mark.parametrize(
    "path, body, field", MORE, ids=[f"{p}-{f}-{i}" for i, (p, _, f) in enumerate(MORE)]
)
def test_embeddings_and_batches_of_one_of_mismatched_shape_are_a_400(path, body, field):
    reply = http_app().post(path, body)
    assert reply.status == 400, reply
    assert field in reply.body, reply


def test_a_lora_id_list_sampled_n_times_is_not_a_500():
    """lora_id is indexed per sample like lora_path; a client's list is refused (0222) or taken,
    never an IndexError."""
    body = {"text": BATCH, "lora_id": ["x", "y"], "sampling_params": {"n": 2, "max_new_tokens": 4}}
    reply = http_app().post("/generate", body)
    assert reply.status in (200, 400), reply
