"""0007: a NaN or infinite temperature is rejected when the request is validated (HTTP 400)
instead of reaching the sampler, where NaN probabilities fail a device-side assert."""

import json
import math

import pytest

from sglang.srt.sampling.sampling_params import SamplingParams

VOCAB = 262144


@pytest.mark.parametrize("temperature", [math.nan, math.inf, -math.inf, -0.5])
def test_bad_temperature_is_rejected(temperature):
    with pytest.raises(ValueError, match="temperature must be finite and non-negative"):
        SamplingParams(temperature=temperature).verify(VOCAB)


def test_nan_from_a_json_body_is_rejected():
    """Python's json module accepts the non-standard NaN literal that a client may send."""
    params = json.loads('{"temperature": NaN, "max_new_tokens": 4}')
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(**params).verify(VOCAB)


@pytest.mark.parametrize("temperature", [0.0, 1e-7, 0.7, 1.0, 5.0])
def test_usable_temperatures_pass(temperature):
    SamplingParams(temperature=temperature).verify(VOCAB)
