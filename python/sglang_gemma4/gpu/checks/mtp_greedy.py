"""Greedy decoding with frozen-KV MTP must emit exactly the tokens of greedy decoding without it.

    python -m sglang_gemma4.gpu.checks.mtp_greedy --out DIR [--variants 26b-a4b 31b] [--dry-run]

Per variant: a reduced-layer random-weight target and an assistant draft built to agree with it part
of the time (below), then the patched build serving the target greedy without MTP and with MTP, the
same prompts as one batch, under a KV budget whose SWA pool the load fills. The token ids are
compared request by request. Writes DIR/mtp-greedy.jsonl and DIR/mtp-greedy.md; exits non-zero
unless every token matches and the logged accept length is in ACCEPT_RANGE (partial acceptance: some
drafts rejected).

Why the draft is constructed, not trained: a random-weight Gemma-4 (checkpoint.py's weights) repeats
its last token forever. The current token's embedding (RMS 4 into layer 0) outweighs what four
random layers add, and the tied LM head scores that token far above any other. A draft trained on
such outputs learns to copy and is accepted every time, and the comparison only sees one token per
request. So:

- the target keeps its random layers but gets an untied LM head whose row succ[x] is embedding row
x:
  its greedy output walks a random permutation of the ordinary ids, x -> succ[x] -> ..., with the
  same wide margin (bf16 noise of a verify step or another batch cannot flip a choice);
- the draft sees the token it continues through the target's embedding (sglang feeds it
  embedding[token] and the target's hidden state through pre_projection). Its pre_projection keeps
  the token half only, and its LM head's row succ[x] points along pre_projection's image of
  embedding[x] for the tokens x of a known set (DRAFT_AGREEMENT of the ordinary ids), random
  elsewhere. Its layers stay random and read the target's KV as served, but add too little to move
  that choice. It drafts succ[x] after x in the set and a random token otherwise, so a step accepts
  1 + f + f^2 + f^3 tokens on average (f = DRAFT_AGREEMENT): 2.53 of 4 at f = 0.7.

Limit: the target's choices hardly depend on the context, so KV read from a wrong page changes no
token; such a bug shows here only if it crashes the server or turns activations into NaN.
"""

import argparse
import json
import math
from pathlib import Path

from sglang_gemma4.gpu.serve.checkpoint import ordinary_ids, token_ids, write_checkpoint
from sglang_gemma4.gpu.serve.pool_usage import parse, summary
from sglang_gemma4.gpu.serve.presets import MTP_STEPS, SIMULATED_ACCEPT_LEN
from sglang_gemma4.gpu.serve.server import Server, http_json, patched_env
from sglang_gemma4.gpu.serve.variants import COMMON, assistant_text_config

LAYERS = 4
DRAFT_AGREEMENT = 0.7
ACCEPT_RANGE = (1.5, 3.5)
# Prompts cross the 1024-token sliding window; all sent at once, they need more SWA KV than the pool
# holds.
PROMPT_LENGTHS = (300, 900, 1500, 2500, 4000)
REQUESTS = 40
NEW_TOKENS = 256
# A full-attention pool of 32768 tokens and an SWA pool of a quarter of it: about eight requests'
# windows, so the SWA pool fills (requests queue, and may be retracted) while the full pool still
# has room.
KV_FLAGS = ("--max-total-tokens", "32768", "--swa-full-tokens-ratio", "0.25")
# decode graphs for the batches at the end of the run, eager above; no prefill graphs: a shorter
# start
GRAPHS = ("--cuda-graph-max-bs-decode", "8", "--cuda-graph-backend-prefill", "disabled")


def successor(vocab_size: int, seed: int):
    """A random permutation of the ordinary ids (the specials map to themselves): the target's next
    token."""
    import torch

    ordinary = ordinary_ids(vocab_size)
    order = torch.randperm(ordinary, generator=torch.Generator().manual_seed(seed))
    return torch.cat([order, torch.arange(ordinary, vocab_size)])


def draft_knows(vocab_size: int, fraction: float, seed: int):
    """The ordinary ids after which the draft proposes the target's next token."""
    import torch

    knows = torch.rand(vocab_size, generator=torch.Generator().manual_seed(seed)) < fraction
    knows[ordinary_ids(vocab_size) :] = False
    return knows


def expected_accept_length(fraction: float, steps: int = MTP_STEPS) -> float:
    """Tokens a verify step emits on average when each draft is right with probability `fraction`:
    the bonus token, then the drafts up to the first wrong one."""
    return sum(fraction**k for k in range(steps + 1))


def permuted_head(embedding, succ):
    """LM head rows: row succ[x] is embedding row x, so the target scores succ[x] highest after
    x."""
    import torch

    head = torch.empty_like(embedding)
    head[succ] = embedding
    return head


def make_draft_agree_(draft, target_embedding, succ, knows) -> None:
    """Set a (randomly initialised) transformers Gemma4AssistantForCausalLM so that after a token x
    of `knows` it scores succ[x] highest; `target_embedding` is the target's (vocab, backbone)
    embedding."""
    import torch

    backbone = target_embedding.shape[1]
    with torch.no_grad():
        project = (
            draft.pre_projection.weight
        )  # (hidden, 2 x backbone): [token embedding | recurrent state]
        project[:, backbone:] = 0
        project[:, :backbone] *= math.sqrt(
            2
        )  # fan-in of the token half only: O(1) activations as before
        head = draft.model.embed_tokens.weight  # tied to lm_head
        row_norm = head.norm(dim=1).mean()
        for tokens in torch.nonzero(knows).squeeze(1).split(16384):
            rows = target_embedding[tokens].to(project) @ project[:, :backbone].T
            head[succ[tokens]] = rows / rows.norm(dim=1, keepdim=True) * row_norm


def read_tensor(folder: Path, name: str):
    """One tensor of a checkpoint, from whichever shard holds it."""
    from safetensors import safe_open

    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(shard, "pt") as f:
            if name in f.keys():
                return f.get_tensor(name)
    raise KeyError(f"no shard of {folder} holds {name}")


def write_target(variant: str, out: Path, succ, seed: int, device: str):
    """A reduced random-weight checkpoint (checkpoint.py) with an untied LM head (permuted_head);
    returns its embedding."""
    from safetensors.torch import save_file

    write_checkpoint(variant, out, layers=LAYERS, weights="random", seed=seed, device=device)
    embedding = read_tensor(out, "model.embed_tokens.weight")
    save_file(
        {"lm_head.weight": permuted_head(embedding, succ).contiguous()}, out / "lm_head.safetensors"
    )
    index = out / "model.safetensors.index.json"
    if index.exists():  # sglang loads only the shards an index names
        data = json.loads(index.read_text())
        data["weight_map"]["lm_head.weight"] = "lm_head.safetensors"
        index.write_text(json.dumps(data, indent=1))
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}, indent=1))
    return embedding


def write_draft(
    variant: str, out: Path, target_embedding, succ, knows, seed: int, device: str
) -> None:
    """The assistant draft (make_draft_agree_) with checkpoint.py's config and tokenizer."""
    import torch
    from transformers.models.gemma4_assistant.configuration_gemma4_assistant import (
        Gemma4AssistantConfig,
    )
    from transformers.models.gemma4_assistant.modeling_gemma4_assistant import (
        Gemma4AssistantForCausalLM,
    )

    from sglang_gemma4.gpu.serve.checkpoint import init_random_

    text = assistant_text_config(variant)
    config = Gemma4AssistantConfig(
        text_config={**text, **token_ids(text["vocab_size"])},
        backbone_hidden_size=target_embedding.shape[1],
        use_ordered_embeddings=False,
    )
    with torch.device(device):
        draft = Gemma4AssistantForCausalLM(config).to(torch.float32)
    init_random_(draft, seed)
    make_draft_agree_(draft, target_embedding.to(device), succ.to(device), knows.to(device))
    draft.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    write_checkpoint(
        variant, out, arch="assistant"
    )  # after: its config.json replaces save_pretrained's


def prompts(vocab_size: int, seed: int) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    bos = token_ids(vocab_size)["bos_token_id"]
    lengths = [PROMPT_LENGTHS[i % len(PROMPT_LENGTHS)] for i in range(REQUESTS)]
    return [
        [bos] + torch.randint(0, ordinary_ids(vocab_size), (n - 1,), generator=g).tolist()
        for n in lengths
    ]


def generate(server: Server, batch: list[list[int]]) -> list[list[int]]:
    status, body = http_json(
        "POST",
        f"{server.url}/generate",
        {
            "input_ids": batch,
            "sampling_params": [
                {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True} for _ in batch
            ],
        },
        timeout=600,
    )
    if status != 200:
        raise RuntimeError(f"/generate answered {status}: {body[:500]}")
    return [answer["output_ids"] for answer in json.loads(body)]


def first_divergence(
    reference: list[list[int]], candidate: list[list[int]]
) -> tuple[int, int] | None:
    """(request, position) of the first token that differs, a missing or extra token included; None
    if equal."""
    for request, (want, got) in enumerate(zip(reference, candidate, strict=True)):
        for position in range(max(len(want), len(got))):
            if position >= len(want) or position >= len(got) or want[position] != got[position]:
                return request, position
    return None


def follows(outputs: list[list[int]], succ) -> float:
    """The share of consecutive output tokens where the target took succ[x] after x (1.0: the head
    rules)."""
    pairs = [(a, b) for out in outputs for a, b in zip(out, out[1:])]
    return sum(int(succ[a]) == b for a, b in pairs) / len(pairs) if pairs else 0.0


def predicted_accept_length(outputs: list[list[int]], succ, knows, steps: int = MTP_STEPS) -> float:
    """The accept length the constructed draft should reach on these outputs: from each step's bonus
    token, drafts are accepted while the last token is known and the target took its successor."""
    emitted = verifies = 0
    for out in outputs:
        position = 0  # the bonus token the next step drafts from
        while position < len(out) - 1:
            accepted = 0
            while (
                accepted < steps
                and position + accepted + 1 < len(out)
                and bool(knows[out[position + accepted]])
                and int(succ[out[position + accepted]]) == out[position + accepted + 1]
            ):
                accepted += 1
            step = min(accepted + 1, len(out) - 1 - position)
            emitted, verifies, position = emitted + step, verifies + 1, position + step
    return emitted / verifies if verifies else 0.0


def served_stats(log: str) -> dict:
    """What the server's log says of the run: the median accept length of its decode lines (MTP
    only), the SWA pool's peak usage and the requests retracted because the pool ran out."""
    stats = summary(parse(log))
    return {
        "accept_len": stats.get("median_accept_len"),
        "peak_swa_token_usage": stats["peak_swa_token_usage"],
        "retracted_reqs": stats["retracted_reqs"],
    }


def verdict(row: dict) -> bool:
    low, high = ACCEPT_RANGE
    return (
        row.get("error") is None
        and row["divergence"] is None
        and row["tokens_compared"] > 0
        and row["accept_len"] is not None
        and low <= row["accept_len"] <= high
    )


def table(rows: list[dict]) -> str:
    lines = [
        "| variant | requests | tokens compared | first divergence (request, position) | "
        "accept length (log; "
        "predicted) | SWA pool peak (off; on) | retracted (off; on) | pass |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['variant']} | - | - | error: {r['error'][:200]} | - | - | - | NO |")
            continue
        where = (
            "none" if r["divergence"] is None else f"({r['divergence'][0]}, {r['divergence'][1]})"
        )
        lines.append(
            f"| {r['variant']} | {r['requests']} | {r['tokens_compared']} | {where} | "
            f"{r['accept_len']}; {r['predicted_accept_len']:.2f} | "
            f"{r['peak_swa_token_usage_off']:.2f}; "
            f"{r['peak_swa_token_usage']:.2f} | {r['retracted_reqs_off']:g}; "
            f"{r['retracted_reqs']:g} | "
            f"{'yes' if verdict(r) else 'NO'} |"
        )
    low, high = ACCEPT_RANGE
    return "\n".join(lines) + (
        "\n\nPASS: every token of greedy decoding with MTP equals greedy decoding "
        "without it, and the accept length "
        f"the server logged is in [{low}, {high}] of {MTP_STEPS + 1} (the draft agrees "
        "with the target on "
        f"{DRAFT_AGREEMENT:.0%} of the tokens: expected "
        f"{expected_accept_length(DRAFT_AGREEMENT):.2f}).\n"
    )


def servers(
    variant: str, target: Path, draft: Path, out: Path, env: dict | None = None
) -> tuple[Server, Server]:
    """The patched build serving the target greedy without MTP, then with the draft (both with
    `env`, e.g. an opt-in switch), both on the static KV split that MTP serves with and KV_FLAGS
    size."""
    flags, env = [*KV_FLAGS, *GRAPHS], env or {}
    return (
        Server(
            variant,
            "patched",
            out / f"{variant}-mtp-off.log",
            model=str(target),
            extra=[*flags, "--static-kv"],
            env=env,
        ),
        Server(
            variant,
            "patched",
            out / f"{variant}-mtp-on.log",
            model=str(target),
            mtp=True,
            draft=str(draft),
            extra=flags,
            env=env,
        ),
    )


def build(variant: str, checkpoints: Path, seed: int):
    """The target and its agreeing draft under `checkpoints` (VARIANT, VARIANT-assistant): (target,
    draft, succ, knows)."""
    import torch

    target, draft = checkpoints / variant, checkpoints / f"{variant}-assistant"
    vocab = COMMON["vocab_size"]
    succ, knows = successor(vocab, seed), draft_knows(vocab, DRAFT_AGREEMENT, seed + 1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    embedding = write_target(variant, target, succ, seed, device)
    write_draft(variant, draft, embedding.float(), succ, knows, seed + 2, device)
    del embedding
    torch.cuda.empty_cache()  # the servers size their pools from the free memory
    return target, draft, succ, knows


def check(variant: str, checkpoints: Path, out: Path, seed: int, env: dict) -> dict:
    target, draft, succ, knows = build(variant, checkpoints, seed)
    batch = prompts(COMMON["vocab_size"], seed)
    outputs, stats = [], []
    for server in servers(variant, target.resolve(), draft.resolve(), out, env):
        with server:
            try:
                outputs.append(generate(server, batch))
            except Exception as e:
                raise RuntimeError(
                    f"{server.log_path.name}: {e} ({server.death() or 'the server still runs'})"
                ) from e
            if died := server.death_once_idle():
                raise RuntimeError(f"{server.log_path.name}: the server died once idle: {died}")
        stats.append(served_stats(server.log_path.read_text(errors="replace")))
    (off, on), (off_stats, on_stats) = outputs, stats
    return {
        "variant": variant,
        "requests": len(batch),
        "tokens_compared": sum(map(len, off)),
        "divergence": first_divergence(off, on),
        "target_follows_successor": round(follows(off, succ), 4),
        "predicted_accept_len": predicted_accept_length(off, succ, knows),
        **on_stats,
        "peak_swa_token_usage_off": off_stats["peak_swa_token_usage"],
        "retracted_reqs_off": off_stats["retracted_reqs"],
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True)
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(SIMULATED_ACCEPT_LEN),
        choices=list(SIMULATED_ACCEPT_LEN),
    )
    p.add_argument("--checkpoints", default="checkpoints/mtp-greedy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--env",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="environment of both servers, e.g. an opt-in switch",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    return p


def main() -> int:
    args = parser().parse_args()
    out, checkpoints = Path(args.out), Path(args.checkpoints)
    if args.dry_run:
        for variant in args.variants:
            for server in servers(
                variant,
                checkpoints / variant,
                checkpoints / f"{variant}-assistant",
                out,
                patched_env(args.env),
            ):
                print(server.describe())
        return 0
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for variant in args.variants:
        try:
            row = check(variant, checkpoints, out, args.seed, patched_env(args.env))
        except Exception as e:  # noqa: BLE001 - a variant that fails is a row of the table, the next still runs
            row = {"variant": variant, "error": f"{type(e).__name__}: {e}"[-800:]}
        rows.append(row)
        with open(out / "mtp-greedy.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    report = table(rows)
    (out / "mtp-greedy.md").write_text(report)
    print(report)
    return 0 if all(map(verdict, rows)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
