"""0004: logit_bias values that would poison the sampler (NaN, +inf) or the batch builder (not a
number), and a logit_bias that is not a mapping, are rejected with a ValueError (HTTP 400)."""

import math

import pytest

from sglang.srt.sampling.sampling_params import SamplingParams

VOCAB = 262144


def verify(logit_bias):
    SamplingParams(temperature=0.7, logit_bias=logit_bias).verify(VOCAB)


@pytest.mark.parametrize("bias", [math.nan, math.inf, "5", None, True, [1.0]])
def test_bias_that_is_not_a_usable_number_is_rejected(bias):
    with pytest.raises(ValueError, match="logit_bias values must be numbers below \\+inf"):
        verify({"17": 1.0, "42": bias})


@pytest.mark.parametrize("logit_bias", [[["17", 1.0]], "17:1.0"])
def test_logit_bias_that_is_not_a_mapping_is_rejected(logit_bias):
    with pytest.raises(ValueError, match="logit_bias must map token ids to biases"):
        verify(logit_bias)


@pytest.mark.parametrize("bias", [-math.inf, -100, 0, 2.5, 100])
def test_usable_biases_still_pass(bias):
    verify({"17": bias, "0": 1})  # -inf bans a token: allowed


def test_out_of_vocab_key_still_named():
    with pytest.raises(ValueError, match="logit_bias must has keys"):
        verify({str(VOCAB): 1.0})
