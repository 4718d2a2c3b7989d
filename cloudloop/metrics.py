"""The project's Prometheus metrics and the one HTTP endpoint serving them with health checks.

``/metrics`` serves this process's registry followed by the Temporal SDK runtime's metrics
(fetched from the runtime's own loopback exporter), so one scrape sees both. ``/healthz`` is
liveness; ``/readyz`` answers 200 once :meth:`MetricsServer.set_ready` was called.
"""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import REGISTRY, Counter, generate_latest

CLOUD_API_REQUESTS = Counter(
    "cloud_api_requests",
    "Cloud API requests made by cloudloop, by provider, operation and outcome.",
    ["provider", "operation", "outcome"],
)

WORKFLOWS_STARTED = Counter(
    "cloudloop_workflows_started",
    "Workflows started by starters (a start that joined a running workflow is not counted).",
    ["workflow"],
)


class MetricsServer:
    """A small threaded HTTP server for ``/metrics``, ``/healthz`` and ``/readyz``."""

    def __init__(self, bind: str, port: int, *, temporal_metrics_url: str | None = None) -> None:
        self._ready = threading.Event()
        temporal_url = temporal_metrics_url
        ready = self._ready

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, b"ok\n", "text/plain")
                elif self.path == "/readyz":
                    self._send(
                        200 if ready.is_set() else 503,
                        b"ok\n" if ready.is_set() else b"not ready\n",
                        "text/plain",
                    )
                elif self.path == "/metrics":
                    body = generate_latest(REGISTRY)
                    if temporal_url:
                        try:
                            with urllib.request.urlopen(temporal_url, timeout=2) as response:
                                body += response.read()
                        except OSError:
                            pass
                    self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((bind, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def set_ready(self) -> None:
        self._ready.set()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
