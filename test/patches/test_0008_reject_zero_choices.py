"""0008: OpenAI-style requests with n < 1 fail validation (HTTP 400) instead of waiting forever
for a choice that is never generated."""

import pytest
from pydantic import ValidationError

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("n", [0, -1])
def test_chat_needs_at_least_one_choice(n):
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        ChatCompletionRequest(messages=MESSAGES, n=n)


@pytest.mark.parametrize("n", [0, -3])
def test_completion_needs_at_least_one_choice(n):
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        CompletionRequest(prompt="hi", n=n)


@pytest.mark.parametrize("n", [1, 4])
def test_one_or_more_choices_pass(n):
    assert ChatCompletionRequest(messages=MESSAGES, n=n).n == n
    assert CompletionRequest(prompt="hi", n=n).n == n
    assert ChatCompletionRequest(messages=MESSAGES).n == 1
