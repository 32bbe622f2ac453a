"""The route table (gpu/checks/routes.py) against the routes sglang's HTTP app registers (the
patched tree's sglang.srt.entrypoints.http_server.app): one entry per (method, path), each public or
admin; a route the app adds (at a rebase) or drops fails here until the table says what it is. The
fields the table names for a route's body must be fields of the model the route reads its body
into."""

import dataclasses
import functools
import typing

import patched_tree  # noqa: F401  (sglang from the patched tree)
import pytest

from sglang_gemma4.gpu.checks import routes


@functools.cache
def app():
    from sglang.srt.entrypoints.http_server import app

    return app


def test_every_route_the_app_registers_is_in_the_table():
    table = {key for key, route in routes.BY_KEY.items() if not route.only_when}
    missing = sorted(routes.registered(app()) - table)
    assert not missing, (
        f"routes sglang registers that gpu/checks/routes.py does not classify: {missing}"
    )


def test_every_route_in_the_table_is_registered():
    table = {key for key, route in routes.BY_KEY.items() if not route.only_when}
    stale = sorted(table - routes.registered(app()))
    assert not stale, f"routes in gpu/checks/routes.py that sglang no longer registers: {stale}"


def test_every_route_has_a_class_and_a_public_body_route_an_example():
    for route in routes.ROUTES:
        assert route.cls in (routes.PUBLIC, routes.ADMIN), route
        if route.cls == routes.PUBLIC and route.body not in (None, "multipart", "websocket"):
            assert isinstance(route.example, dict) and route.fields, route


def _body_models():
    """(method, path) -> the class FastAPI reads the route's JSON body into."""
    from fastapi.routing import APIRoute

    found = {}

    def walk(items):
        for route in items:
            if hasattr(route, "original_router"):
                walk(route.original_router.routes)
            elif isinstance(route, APIRoute) and route.dependant.body_params:
                annotation = route.dependant.body_params[0].field_info.annotation
                models = [a for a in typing.get_args(annotation) if a is not type(None)] or [
                    annotation
                ]
                for method in route.methods:
                    found[(method, route.path)] = models[0]

    walk(app().routes)
    return found


def _field_names(model) -> set[str]:
    if hasattr(model, "model_fields"):  # pydantic
        return set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
    if dataclasses.is_dataclass(model):
        return {f.name for f in dataclasses.fields(model)}
    return set(getattr(model, "__struct_fields__", ()))  # msgspec


@pytest.mark.parametrize(
    "route",
    [r for r in routes.ROUTES if r.body and r.body not in ("multipart", "websocket")],
    ids=lambda r: f"{r.method} {r.path}",
)
def test_the_body_model_and_its_fields_are_the_apps(route):
    model = _body_models().get((route.method, route.path))
    assert model is not None and model.__name__ == route.body, (route, model)
    unknown = (set(route.fields) | set(route.example or {})) - _field_names(model)
    assert not unknown, (
        f"{route.method} {route.path}: {model.__name__} has no fields {sorted(unknown)}"
    )


def test_routes_registered_only_under_a_condition_are_marked():
    # /dumper/{method} appears only with DUMPER_SERVER_PORT=reuse, /metrics only with
    # --enable-metrics
    assert {r.path for r in routes.ROUTES if r.only_when} == {"/dumper/{method}", "/metrics"}
