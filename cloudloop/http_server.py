"""The threaded HTTP(S) server that the metrics endpoint and the codec server run in a thread.

Rules:
- One daemon thread accepts; each request runs in a daemon thread of its own, so a slow client
  blocks only itself and no request keeps the process alive at exit.
- With ``tls`` (an :class:`ssl.SSLContext`) the server speaks HTTPS only; the handshake runs in
  the request's thread (``do_handshake_on_connect=False``), never in the accepting one.
- :meth:`ThreadedServer.stop` returns within :data:`SHUTDOWN_POLL_S`.
- :class:`QuietHandler` writes nothing of a request to stderr (the standard handler prints its
  client and path); a server logs its own line, with nothing the request carried.
"""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

#: How often the accepting thread looks for :meth:`ThreadedServer.stop` (the standard library's
#: 0.5 s made every stop, at process exit and in each test, wait that long).
SHUTDOWN_POLL_S = 0.05


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that writes no access line of its own."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class ThreadedServer:
    """``handler`` served on ``bind:port`` (0: any free port, then in :attr:`port`)."""

    def __init__(
        self,
        handler: type[BaseHTTPRequestHandler],
        bind: str,
        port: int,
        *,
        tls: ssl.SSLContext | None,
        thread_name: str,
    ) -> None:
        self._server = ThreadingHTTPServer((bind, port), handler)
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self.scheme = "https" if tls is not None else "http"
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_S},
            name=thread_name,
            daemon=True,
        )

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
