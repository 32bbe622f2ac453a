"""0214: a chat request may not replace the server's chat template: chat_template_kwargs reach
apply_chat_template as keyword arguments, and its chat_template argument renders the prompt with the
client's template instead of the model's. Such a request (/v1/chat/completions, /v1/tokenize with
messages) is refused with 400 and reaches no scheduler, unless the server was started with
--enable-client-chat-template. Template variables (enable_thinking, ...) pass as before."""

import pytest
from request_pipeline import front_end

MESSAGES = [{"role": "user", "content": "hi"}]
CLIENT_TEMPLATE = "OVERRIDE {{ messages[0]['content'] }}"


@pytest.fixture
def client_templates():
    """Turns --enable-client-chat-template on (ServerArgs is read-only once resolved)."""
    args = front_end().manager.server_args
    before = getattr(args, "enable_client_chat_template", None)

    def enable(on: bool):
        object.__setattr__(args, "enable_client_chat_template", on)

    yield enable
    object.__setattr__(args, "enable_client_chat_template", before)


def prompt(answer) -> str:
    return front_end().manager.tokenizer.decode(answer.sent[0].input_ids)


def test_a_client_template_is_refused():
    answer = front_end().post(
        "/v1/chat/completions",
        {"messages": MESSAGES, "chat_template_kwargs": {"chat_template": CLIENT_TEMPLATE}},
    )
    assert answer.status == 400 and "chat_template" in answer.message and answer.sent == []


def test_tokenize_refuses_it_too():
    from sglang.srt.entrypoints.openai.protocol import TokenizeRequest
    from sglang.srt.entrypoints.openai.serving_tokenize import OpenAIServingTokenize

    fe = front_end()
    serving = OpenAIServingTokenize(
        fe.manager, fe.openai["/v1/chat/completions"][1].template_manager
    )
    request = TokenizeRequest(
        messages=MESSAGES, chat_template_kwargs={"chat_template": CLIENT_TEMPLATE}
    )
    response = fe.loop.run_until_complete(serving.handle_request(request, None))
    assert response.status_code == 400


def test_template_variables_pass():
    answer = front_end().post(
        "/v1/chat/completions",
        {"messages": MESSAGES, "chat_template_kwargs": {"enable_thinking": False}},
    )
    assert answer.status == 200 and len(answer.sent) == 1
    assert "OVERRIDE" not in prompt(answer) and "user: hi" in prompt(answer)


def test_the_flag_allows_a_client_template(client_templates):
    client_templates(True)
    answer = front_end().post(
        "/v1/chat/completions",
        {"messages": MESSAGES, "chat_template_kwargs": {"chat_template": CLIENT_TEMPLATE}},
    )
    assert answer.status == 200 and prompt(answer).startswith("OVERRIDE hi")


def test_the_flag_parses():
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert parser.parse_args(["--model-path", "m"]).enable_client_chat_template is False
    assert parser.parse_args(
        ["--model-path", "m", "--enable-client-chat-template"]
    ).enable_client_chat_template
