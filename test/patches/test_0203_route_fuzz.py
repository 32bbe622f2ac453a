"""Fuzzer v2 in process: tens of thousands of generated requests (gpu/checks/fuzz.py's route_case)
to every route of the route table (gpu/checks/routes.py) through sglang's HTTP app, behind the
API-key check of a server started with --admin-api-key: hostile fields, /generate's batch forms,
bodies that are not objects, truncated and invalid JSON, wrong content types, admin routes with and
without the key, rid games. None may be answered 5xx or let an exception out, and each generation
request that reaches the scheduler must be within what the scheduler and its kernels take
(test_0010's check)."""

import logging
import random
import time

import pytest
from http_app import ADMIN_KEY, http_app
from request_pipeline import VOCAB, front_end
from session_seed import session_seed
from test_0010_request_fields_fuzz import within_kernel_limits

from sglang_gemma4.gpu.checks import routes
from sglang_gemma4.gpu.checks.fuzz import route_case

HEALTH_CHECKS = {"/health", "/health_generate"}
FIXED_SEED = 20261127
# the fixed seed's requests: its first 2,000 reach every route (the coverage check below), the
# rest add cases at 3 ms each
FIXED_COUNT = 3000
RANDOM_SEED = session_seed()  # in the test id: a failure names it


def fuzz(seed: int, count: int) -> tuple[list[str], dict]:
    rng = random.Random(seed)
    app = http_app()
    failures, reached = [], {}
    logging.disable(logging.ERROR)  # each rejected request logs an error, with its traceback
    try:
        _send_all(rng, app, count, failures, reached)
    finally:
        logging.disable(logging.NOTSET)
    return failures, reached


def _send_all(rng, app, count, failures, reached):
    for i in range(count):
        case = route_case(rng, VOCAB, admin_key=ADMIN_KEY, in_process=True)
        front_end().sent = []
        try:
            reply = app.send(
                case.method, case.path, raw=case.body, headers=case.headers, gated=True, timeout=20
            )
        except Exception as e:  # a timeout, or an exception the app let out
            failures.append(
                f"#{i} {case.method} {case.path} {case.kind}: {type(e).__name__} {e}: "
                f"{case.body!r:.300}"
            )
            continue
        reached.setdefault(case.route, set()).add(reply.status)
        # in process the health checks find no scheduler answering: 503, as a server whose scheduler
        # is gone
        if reply.status >= 500 and not (reply.status == 503 and case.route[1] in HEALTH_CHECKS):
            failures.append(
                f"#{i} {case.method} {case.path} {case.kind} answered {reply.status} "
                f"{reply.body!r:.200}: {case.body!r:.300}"
            )
        broken = [
            problem for tokenized in front_end().sent for problem in within_kernel_limits(tokenized)
        ]
        if broken:
            failures.append(
                f"#{i} {case.method} {case.path} {case.kind} accepted {broken}: {case.body!r:.300}"
            )


@pytest.mark.parametrize(
    "seed, count",
    [(FIXED_SEED, FIXED_COUNT), (RANDOM_SEED, 1000)],
    ids=[f"fixed-seed-{FIXED_SEED}", f"random-seed-{RANDOM_SEED}"],
)
def test_no_generated_request_is_answered_5xx(seed, count):
    http_app()  # built once per process (seconds), outside the timing
    started = time.monotonic()
    failures, reached = fuzz(seed, count)
    print(f"route fuzz seed {seed}: {count} requests in {time.monotonic() - started:.1f} s")
    assert not failures, f"seed {seed}: {len(failures)} of {count} requests:\n" + "\n".join(
        failures[:15]
    )
    if seed == FIXED_SEED:
        unreached = [
            r
            for r in routes.ROUTES
            if not r.only_when and r.body != "websocket" and (r.method, r.path) not in reached
        ]
        assert not unreached, f"routes the generator never sent a request to: {unreached}"


def test_admin_routes_need_the_key_and_public_ones_do_not():
    app = http_app()
    assert app.send("POST", "/flush_cache", gated=True).status == 401
    assert (
        app.send(
            "POST", "/pause_generation", {}, gated=True, headers={"authorization": "Bearer wrong"}
        ).status
        == 401
    )
    assert (
        app.send(
            "POST",
            "/pause_generation",
            raw=b"[1]",
            gated=True,
            headers={"authorization": f"Bearer {ADMIN_KEY}", "content-type": "application/json"},
        ).status
        == 400
    )
    reply = app.send(
        "POST", "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}}, gated=True
    )
    assert reply.status == 200 and reply.dispatched, reply
