"""0212: the HTTP server sends CORS headers only for the origins of --cors-allow-origins:

- unset (the default), a web page of another origin gets no CORS header on an answer and no
  preflight, so its browser neither shows it the answer nor sends a JSON body (which needs one);
- listed origins get CORS with credentials, other origins none;
- '*' allows every origin, without credentials."""

from stub_server import serve

PAGE = "https://page.example"
APP = "https://app.example"


def preflight(client, origin):
    return client.options(
        "/v1/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )


def cors_headers(response) -> dict:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


def test_no_cors_by_default(monkeypatch):
    client, _ = serve(monkeypatch)
    answer = client.get("/v1/models", headers={"Origin": PAGE})
    assert answer.status_code == 200 and cors_headers(answer) == {}
    answer = preflight(client, PAGE)
    assert cors_headers(answer) == {} and answer.status_code != 200


def test_listed_origins_only(monkeypatch):
    client, _ = serve(monkeypatch, cors_allow_origins=[APP])
    answer = client.get("/v1/models", headers={"Origin": APP})
    assert answer.headers["access-control-allow-origin"] == APP
    assert answer.headers["access-control-allow-credentials"] == "true"
    assert preflight(client, APP).status_code == 200
    assert (
        "access-control-allow-origin"
        not in client.get("/v1/models", headers={"Origin": PAGE}).headers
    )
    assert preflight(client, PAGE).headers.get("access-control-allow-origin") is None


def test_any_origin_goes_without_credentials(monkeypatch):
    client, _ = serve(monkeypatch, cors_allow_origins=["*"])
    answer = client.get("/v1/models", headers={"Origin": PAGE})
    assert answer.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in answer.headers


def test_the_flag_parses():
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert parser.parse_args(
        ["--model-path", "m", "--cors-allow-origins", APP, PAGE]
    ).cors_allow_origins == [APP, PAGE]
    assert parser.parse_args(["--model-path", "m"]).cors_allow_origins is None
