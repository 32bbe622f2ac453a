"""0009: an unknown key in sampling_params is reported as the client's error (ValueError, HTTP 400)
instead of escaping as a TypeError (HTTP 500)."""

from types import SimpleNamespace

import pytest

from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.managers.tokenizer_manager import TokenizerManager
from sglang.srt.sampling.sampling_params import SamplingParams


def manager() -> TokenizerManager:
    tm = object.__new__(TokenizerManager)
    tm.preferred_sampling_params = None
    tm.sampling_params_class = SamplingParams
    tm.tokenizer = None
    tm.model_config = SimpleNamespace(vocab_size=262144)
    return tm


@pytest.mark.parametrize("params", [{"bogus": 1}, {"max_new_tokens": 4, "temprature": 0.5}])
def test_unknown_key_is_a_value_error_naming_it(params):
    request = GenerateReqInput(text="hi", sampling_params=params)
    request.normalize_batch_and_arguments()
    key = next(k for k in params if k not in ("max_new_tokens",))
    with pytest.raises(ValueError, match=rf"Invalid sampling_params: .*'{key}'"):
        manager()._create_tokenized_object(request, "hi", [2, 10])
