"""0210: the HTTP server's routes are public (generation, OpenAI and the other front ends, health,
model and server information) or admin (everything else: weight loading and NCCL groups, pausing and
aborting, caches, profiling, logging and dumps, LoRA, memory, and any route not on the public list).

- admin routes answer 403 on a server started without --admin-api-key, whatever key a request
  holds, without reaching their handler; with --admin-api-key they need that key, not --api-key;
- public routes are open without keys and need --api-key when it is set (health without it);
- a route added to the app without being listed is an admin route;
- the server's own per-process key opens admin routes (its /freeze_gc after warm-up);
- SGLANG_OPEN_ADMIN_ROUTES=1: upstream's levels (an unmarked route is open without keys).

On 0.5.23: the routes it registers beyond 0.5.17's (gpu/routes.py lists 0.5.17's) are classified here,
/ready, /v1/decisions and /v1/systemone public, the others admin; its handlers read the published
serving and LoRA config, stood in for the stub server."""

from types import SimpleNamespace

import pytest
import stub_server
from stub_server import bearer, http_routes

import sglang.srt.entrypoints.http_server as http_server
from sglang_gemma4.gpu.checks import routes as route_table

# What an open server let anyone do (each named by its route)
DANGEROUS = [("POST", "/update_weights_from_disk"), ("POST", "/update_weights_from_tensor"),
             ("POST", "/init_weights_update_group"), ("POST", "/update_weights_from_distributed"),
             ("POST", "/load_lora_adapter_from_tensors"), ("POST", "/pause_generation"),
             ("POST", "/abort_request"), ("POST", "/flush_cache"), ("POST", "/configure_logging"),
             ("POST", "/set_internal_state"), ("POST", "/start_profile"), ("POST", "/release_memory_occupation"),
             ("GET", "/set_trace_level"), ("POST", "/scale_elastic_ep"), ("GET", "/is_scaling_elastic_ep")]
PUBLIC = [("POST", "/generate"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
          ("GET", "/v1/models"), ("GET", "/model_info"), ("GET", "/server_info"), ("GET", "/v1/loads"),
          ("POST", "/v1/messages"), ("POST", "/api/chat"), ("GET", "/health"), ("GET", "/ping")]
# The routes 0.5.23 registers and 0.5.17 does not, by class
NEW_PUBLIC = [("GET", "/ready"), ("POST", "/v1/decisions"), ("POST", "/v1/systemone")]
NEW_ADMIN = [("GET", "/get_hicache_l3_cache_layout"), ("POST", "/begin_weight_update"),
             ("POST", "/end_weight_update"), ("POST", "/pd_role_switch")]


def serve(monkeypatch, **server_args):
    """stub_server.serve, with the published config the 0.5.23 handlers read (serving keys, LoRA off)
    stood in by the stub's server args."""
    client, manager = stub_server.serve(monkeypatch, **server_args)
    monkeypatch.setattr(http_server, "get_lora", lambda: SimpleNamespace(enable_lora=False))
    monkeypatch.setattr(http_server, "get_serving", lambda: manager.server_args)
    return client, manager


@pytest.fixture(autouse=True)
def closed(monkeypatch):
    monkeypatch.delenv("SGLANG_OPEN_ADMIN_ROUTES", raising=False)


def admin_routes():
    public = http_server._PUBLIC_ROUTES if hasattr(http_server, "_PUBLIC_ROUTES") else ()
    return [(method, path) for method, path, endpoint in http_routes() if endpoint not in public]


def test_the_dangerous_routes_are_admin_routes():
    admin = admin_routes()
    assert [route for route in DANGEROUS if route not in admin] == []
    assert [route for route in PUBLIC if route in admin] == []


def test_the_routes_new_in_0_5_23_are_classified():
    assert route_table.registered(http_server.app) - set(route_table.BY_KEY) == set(NEW_PUBLIC + NEW_ADMIN)
    admin = admin_routes()
    assert [route for route in NEW_ADMIN if route not in admin] == []
    assert [route for route in NEW_PUBLIC if route in admin] == []


def test_the_new_public_routes_need_only_the_api_key(monkeypatch):
    client, manager = serve(monkeypatch, api_key="user", admin_api_key="admin")
    for method, path in NEW_PUBLIC[1:]:
        assert client.request(method, path).status_code == 401, path
        assert client.request(method, path, headers=bearer("user")).status_code not in (401, 403), path
    assert client.get("/ready").status_code not in (401, 403)  # a readiness probe holds no key


@pytest.mark.parametrize("keys", [{}, {"api_key": "user"}], ids=["no keys", "api key"])
def test_without_an_admin_key_every_admin_route_is_closed(monkeypatch, keys):
    client, manager = serve(monkeypatch, **keys)
    answers = {(method, path): client.request(method, path, headers=bearer("user")).status_code
               for method, path in admin_routes()}
    assert {route: status for route, status in answers.items() if status != 403} == {}
    assert manager.reached == []
    assert "--admin-api-key" in client.post("/flush_cache").json()["error"]


@pytest.mark.parametrize("keys", [{"admin_api_key": "admin"}, {"api_key": "user", "admin_api_key": "admin"}])
def test_with_an_admin_key_admin_routes_need_it(monkeypatch, keys):
    client, manager = serve(monkeypatch, **keys)
    assert client.post("/flush_cache").status_code == 401
    assert client.post("/flush_cache", headers=bearer("user")).status_code == 401
    assert client.post("/update_weights_from_disk", headers=bearer("user"), json={"model_path": "/x"}).status_code == 401
    assert manager.reached == []
    answer = client.post("/flush_cache", headers=bearer("admin"))
    assert answer.status_code == 200 and manager.reached == ["flush_cache"]


def test_public_routes_are_open_without_keys(monkeypatch):
    client, manager = serve(monkeypatch)
    answer = client.get("/v1/models")
    assert answer.status_code == 200 and answer.json()["data"][0]["id"] == "gemma-4"
    for method, path in PUBLIC:
        assert client.request(method, path).status_code not in (401, 403), path


def test_public_routes_need_the_api_key_when_set(monkeypatch):
    client, manager = serve(monkeypatch, api_key="user", admin_api_key="admin")
    assert client.get("/v1/models").status_code == 401
    assert client.get("/v1/models", headers=bearer("admin")).status_code == 401
    assert client.get("/v1/models", headers=bearer("user")).status_code == 200
    assert client.get("/health").status_code not in (401, 403)  # liveness probes hold no key


def test_a_route_added_without_being_listed_is_admin(monkeypatch):
    client, manager = serve(monkeypatch)
    routes = http_server.app.router.routes
    before = list(routes)
    http_server.app.add_api_route("/reset_everything", lambda: {"reset": True}, methods=["POST"])
    try:
        assert client.post("/reset_everything").status_code == 403
        assert client.post("/no_such_route").status_code in (403, 404)
    finally:
        routes[:] = before
    client, manager = serve(monkeypatch, admin_api_key="admin")
    http_server.app.add_api_route("/reset_everything", lambda: {"reset": True}, methods=["POST"])
    try:
        assert client.post("/reset_everything").status_code == 401
        assert client.post("/reset_everything", headers=bearer("admin")).json() == {"reset": True}
    finally:
        routes[:] = before


def test_the_servers_own_key_opens_admin_routes(monkeypatch):
    client, manager = serve(monkeypatch, api_key="user")
    assert client.post("/freeze_gc", headers=bearer(http_server._own_admin_key)).status_code == 200
    assert manager.reached == ["freeze_gc"]
    assert client.get("/v1/models", headers=bearer(http_server._own_admin_key)).status_code == 401


def test_the_kill_switch_restores_upstream_levels(monkeypatch):
    monkeypatch.setenv("SGLANG_OPEN_ADMIN_ROUTES", "1")
    client, manager = serve(monkeypatch)
    assert client.post("/flush_cache").status_code == 200 and manager.reached == ["flush_cache"]
    client, manager = serve(monkeypatch, api_key="user", admin_api_key="admin")
    assert client.post("/flush_cache", headers=bearer("user")).status_code == 401
    assert client.post("/flush_cache", headers=bearer("admin")).status_code == 200


@pytest.mark.parametrize("keys", [{}, {"api_key": "user"}], ids=["no keys", "api key"])
def test_the_freeze_after_warm_up_carries_the_servers_own_key(monkeypatch, keys):
    # 0.5.23 POSTs /freeze_gc once warmed up, an admin route here
    sent = []
    serving = SimpleNamespace(**{"admin_api_key": None, "api_key": None, **keys})
    monkeypatch.setattr(http_server, "get_serving", lambda: serving)
    monkeypatch.setattr(http_server, "ssl_verify_of", lambda server_args: True)
    monkeypatch.setattr(http_server.requests, "post", lambda url, headers, **kw: sent.append(headers)
                        or SimpleNamespace(raise_for_status=lambda: None))
    http_server._freeze_gc_after_server_warmup(SimpleNamespace(url=lambda: "http://127.0.0.1:30000"))
    assert sent == [bearer(http_server._own_admin_key)]
