"""sglang's request path on CPU, in process, up to the scheduler: the real TokenizerManager (built
from a config-only E2B checkpoint with a byte-level tokenizer), the /generate handler and the OpenAI
serving classes, with the scheduler replaced by a recorder. A request comes back as the server would
answer it (an HTTP status and message) with the tokenized requests it handed to the scheduler."""

import asyncio
import functools
import inspect
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gemma4_config import server_args, write_config
from pydantic import TypeAdapter, ValidationError
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

VOCAB = 262144
ADMIN_KEY = "fuzz-admin-key"  # Gemma 4's, which the E2B config declares
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}model: {% endif %}"
)


@dataclass
class Answer:
    status: int
    message: str = ""
    sent: list = field(
        default_factory=list
    )  # TokenizedGenerateReqInput, as handed to the scheduler


class Dispatched(BaseException):
    """Ends a request where it would wait for the scheduler (a BaseException: no handler takes it
    for an error)."""


def byte_level_tokenizer(directory: Path) -> None:
    """A tokenizer with one token per byte (any valid text encodes) and a chat template."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab = {
        token: i for i, token in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))
    }
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    ).save_pretrained(directory)


def _global_per_layer_reads(model_dir: Path) -> None:
    """transformers 5.19 (sglang 0.5.23's pin) raises on a read of a per-layer attribute of a
    Gemma-4 config (head_dim), which 0.5.23's get_config makes for each key of the text config: the
    config opts into reading the global value. Earlier transformers have no such rule; the config is
    left as written there."""
    from transformers import PretrainedConfig

    if hasattr(PretrainedConfig, "allow_global_per_layer_attribute_access"):
        path = model_dir / "config.json"
        config = json.loads(path.read_text())
        path.write_text(
            json.dumps({**config, "allow_global_per_layer_attribute_access": True}, indent=1)
        )


def _publish_for_tokenizer(args) -> None:
    """What a server's process entry does before it builds its TokenizerManager on releases whose
    TokenizerManager reads the server args published for its process (0.5.23's asserts them); the
    0.5.17 one reads its ServerArgs alone, and nothing is published there."""
    from sglang.srt import runtime_context

    if hasattr(runtime_context, "assert_published"):
        runtime_context.publish(args, role="tokenizer")


def _published() -> bool:
    """Whether a server's config is published for this process (0.5.17 serves without one)."""
    from sglang.srt import runtime_context

    try:
        runtime_context.get_exec()
    except ValueError:
        return False
    return True


class FrontEnd:
    def __init__(self, model_dir: Path):
        from sglang.srt import runtime_context
        from sglang.srt.entrypoints import http_server
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
        from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
        from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
        from sglang.srt.managers.io_struct import GenerateReqInput
        from sglang.srt.managers.tokenizer_manager import TokenizerManager
        from sglang.srt.parser.template_manager import TemplateManager
        from sglang.srt.server_args import PortArgs

        # as a server started with an admin key: admin routes open to that key
        # (test/patches/http_app.py)
        if hasattr(runtime_context, "assert_published"):
            # sglang 0.5.23+: a nested Gemma-4 config (gemma4_config.write_config) counts as
            # multimodal unless multimodal is turned off, as the 0.5.17 text-only checkpoint was
            args = server_args(model_dir, "--admin-api-key", ADMIN_KEY, enable_multimodal=False)
        else:
            args = server_args(model_dir, "--admin-api-key", ADMIN_KEY)
        _publish_for_tokenizer(args)
        manager = TokenizerManager(args, PortArgs.init_new(args))
        self.args, self.publishes = args, _published()
        templates = TemplateManager()
        templates.initialize_templates(tokenizer_manager=manager, model_path=args.model_path)
        http_server.set_global_state(http_server._GlobalState(manager, templates, {}))
        self.sent: list = []
        created = manager._create_tokenized_object

        def record(*args, **kwargs):
            tokenized = created(*args, **kwargs)
            self.sent.append(tokenized)
            return tokenized

        async def wait_for_scheduler(obj, request=None):
            raise Dispatched()
            yield

        def not_sent(obj):
            return None

        async def not_sent_async(obj):
            return None

        manager._create_tokenized_object = record
        # as the manager calls them: 0.5.23's are coroutines, 0.5.17's are not
        manager._send_one_request = manager._send_batch_request = (
            not_sent_async if inspect.iscoroutinefunction(manager._send_one_request) else not_sent
        )
        manager._wait_one_response = wait_for_scheduler
        manager.auto_create_handle_loop = lambda: None  # no detokenizer to listen to
        self.manager = manager
        # 0.5.23's /generate first checks the body against its JSON schema (api_contract: the JSON
        # types, unknown sampling keys), then serves it here, as the Engine API does; 0.5.17 has no
        # such check. The requests are sent past it.
        self.generate = getattr(http_server, "serve_generate_request", http_server.generate_request)
        self.generate_input = TypeAdapter(GenerateReqInput)
        self.openai = {
            "/v1/completions": (CompletionRequest, OpenAIServingCompletion(manager, templates)),
            "/v1/chat/completions": (ChatCompletionRequest, OpenAIServingChat(manager, templates)),
        }
        self.loop = asyncio.new_event_loop()  # one loop: the manager's locks bind to the first

    def republish(self) -> None:
        """Publish this server's args again where another test of the process reset the config
        that this release's request path reads (0.5.18+); a test's override of it stays."""
        from sglang.srt import runtime_context

        if self.publishes and not _published():
            runtime_context.publish(self.args, role="tokenizer")

    def post(self, endpoint: str, payload: dict) -> Answer:
        """Answer `payload` as the server would, from its JSON as the server reads it."""
        self.republish()
        body = json.loads(json.dumps(payload, allow_nan=True))
        self.sent = []
        try:
            if endpoint == "/generate":
                response = self.loop.run_until_complete(
                    self.generate(self.generate_input.validate_python(body), None)
                )
            else:
                model, serving = self.openai[endpoint]
                response = self.loop.run_until_complete(
                    serving.handle_request(model.model_validate(body), None)
                )
        except Dispatched:
            return Answer(200, sent=self.sent)
        except ValidationError as e:  # FastAPI answers a body that fails its model with 400
            return Answer(400, str(e))
        except Exception as e:  # FastAPI answers an exception a handler lets out with 500
            return Answer(500, f"{type(e).__name__}: {e}")
        return Answer(
            response.status_code,
            json.loads(response.body).get("error", {}).get("message", "")
            if endpoint == "/generate"
            else json.loads(response.body).get("message", ""),
        )

    def answer_with(self, endpoint: str, payload: dict, output: dict) -> tuple[int, list]:
        """An OpenAI route's answer to `payload` when the scheduler answers it with `output` (what
        the tokenizer manager yields): the HTTP status and the JSON body, or each event of its
        stream."""
        model, serving = self.openai[endpoint]

        async def scheduler_answers(obj, request=None):
            yield output

        async def answer():
            original = self.manager.generate_request
            self.manager.generate_request = scheduler_answers
            try:
                response = await serving.handle_request(model.model_validate(payload), None)
                if hasattr(
                    response, "model_dump_json"
                ):  # a response model, which FastAPI answers with 200
                    return 200, [json.loads(response.model_dump_json())]
                if not hasattr(response, "body_iterator"):
                    return response.status_code, [json.loads(response.body)]
                chunks = [chunk async for chunk in response.body_iterator]
            finally:
                self.manager.generate_request = original
            events = [
                line.removeprefix("data: ")
                for chunk in chunks
                for line in chunk.splitlines()
                if line.startswith("data: ")
            ]
            return response.status_code, [json.loads(e) for e in events if e != "[DONE]"]

        try:
            return self.loop.run_until_complete(answer())
        except Exception as e:  # what FastAPI answers with 500
            return 500, [f"{type(e).__name__}: {e}"]


@functools.cache
def front_end() -> FrontEnd:
    """One per test process: building it takes seconds."""
    model_dir = write_config(Path(tempfile.mkdtemp(prefix="sglang-front-end-")), "e2b", "causal")
    _global_per_layer_reads(model_dir)
    byte_level_tokenizer(model_dir)
    return FrontEnd(model_dir)
