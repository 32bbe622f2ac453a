"""A stand-in HTTP server for the tests that run a harness client against one: a request handler
base that answers JSON (or server-sent events), and serving() that runs a handler on a free port."""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    def answer(self, status, body, events=None):
        """body as JSON, or with events: each as a server-sent event ('[DONE]' as it is)."""
        data = (
            json.dumps(body).encode()
            if events is None
            else "".join(
                f"data: {e if e == '[DONE]' else json.dumps(e)}\n\n" for e in events
            ).encode()
        )
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serves handler on a free local port while in the block; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
