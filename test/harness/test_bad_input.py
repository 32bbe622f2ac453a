"""The bad-input check records a server that died instead of dying with it."""

import socket

from sglang_gemma4.gpu.bad_input import good_request


def test_a_dead_server_reads_as_not_serving():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert good_request(f"http://127.0.0.1:{port}") is False
