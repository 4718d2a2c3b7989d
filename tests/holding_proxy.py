"""An HTTP proxy in front of moto that can hold back the answer to chosen EC2 calls.

A held call has reached moto (the change is made) but the caller has no answer yet: the moment a
worker is most likely to die with work half done. Fault tests kill the worker right then and
check that a fresh worker converges. Every EC2 request passing through is recorded.
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Params = dict[str, str]

#: Headers that describe one hop only; the proxy sets its own.
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


@dataclass
class Hold:
    """Hold the answer to the first request ``matches`` accepts, until :meth:`release`."""

    matches: Callable[[Params], bool]
    #: Set once a matching request reached moto and its answer is being held.
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    params: Params = field(default_factory=dict)

    def release(self) -> None:
        self.released.set()


class HoldingProxy:
    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.requests: list[Params] = []
        self.holds: list[Hold] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def hold(self, action: str, when: Callable[[Params], bool] | None = None) -> Hold:
        hold = Hold(lambda p: p.get("Action") == action and (when is None or when(p)))
        with self._lock:
            self.holds.append(hold)
        return hold

    def actions(self) -> list[str]:
        with self._lock:
            return [p.get("Action", "") for p in self.requests]

    def __enter__(self) -> HoldingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for hold in self.holds:
            hold.release()
        self._server.shutdown()
        self._server.server_close()

    def _claim(self, params: Params) -> Hold | None:
        with self._lock:
            self.requests.append(params)
            for hold in self.holds:
                if not hold.reached.is_set() and hold.matches(params):
                    hold.params = params
                    return hold
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                query = urllib.parse.parse_qs(body.decode(errors="replace"))
                hold = proxy._claim({k: v[0] for k, v in query.items()})
                status, headers, answer = self._forward(body)
                if hold is not None:
                    hold.reached.set()
                    hold.released.wait()
                try:
                    self.send_response(status)
                    for name, value in headers:
                        if name.lower() not in _HOP_HEADERS:
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass  # the caller died while its answer was held

            def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                connection = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS
                    }
                    connection.request("POST", self.path, body=body, headers=headers)
                    response = connection.getresponse()
                    return response.status, response.getheaders(), response.read()
                finally:
                    connection.close()

        return Handler
