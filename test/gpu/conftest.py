"""Fixtures shared by the harness tests."""

import pytest


@pytest.fixture
def argv_of_start(monkeypatch):
    """Server.start(), stopped at its Popen: returns the one argument list it would run."""
    from sglang_gemma4.gpu.serve import server

    started = []

    class Started(Exception):
        pass

    def popen(argv, **kwargs):
        started.append(argv)
        raise Started

    monkeypatch.setattr(server, "port_taken", lambda port: False)
    monkeypatch.setattr(server.subprocess, "Popen", popen)

    def argv_of(s: server.Server) -> list[str]:
        with pytest.raises(Started):
            s.start()
        (argv,) = started
        started.clear()
        return argv

    return argv_of
