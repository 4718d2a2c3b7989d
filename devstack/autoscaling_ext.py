"""A thin Auto Scaling extension in front of moto's server, run by the local stack as its own
component.

moto's server answers ``CompleteLifecycleAction`` and ``RecordLifecycleActionHeartbeat`` with a
500. This proxy answers those two actions itself, as AWS does (a completed action is gone: a
second completion or a later heartbeat gets ``ValidationError: No active Lifecycle Action found``),
records every call with its token and time, and forwards every other request to moto unchanged.

``GET /_cloudloop/autoscaling/calls`` returns the recorded calls; ``POST
/_cloudloop/autoscaling/faults`` with ``{"action": ..., "count": n, "status": 500}`` makes the
next ``n`` calls of that action fail. ``python -m devstack.autoscaling_ext --port P
--upstream http://127.0.0.1:M`` runs it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANDLED = ("CompleteLifecycleAction", "RecordLifecycleActionHeartbeat")
CALLS_PATH = "/_cloudloop/autoscaling/calls"
FAULTS_PATH = "/_cloudloop/autoscaling/faults"
HEALTH_PATH = "/_cloudloop/healthz"
_XMLNS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "trailer"}


class LifecycleLedger:
    """Completed actions, recorded calls and pending faults (shared by the handler threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self.completed: set[str] = set()
        self.faults: dict[str, list[int]] = {}

    def answer(self, action: str, params: dict[str, str]) -> tuple[int, str, str]:
        """(status, error code or "", message) for one lifecycle call, recorded."""
        token = params.get("LifecycleActionToken", "")
        with self.lock:
            pending = self.faults.get(action) or []
            if pending:
                status, code, message = pending.pop(0), "InternalFailure", "injected fault"
            elif token in self.completed:
                status, code = 400, "ValidationError"
                message = f"No active Lifecycle Action found with token {token}"
            else:
                status, code, message = 200, "", ""
                if action == "CompleteLifecycleAction":
                    self.completed.add(token)
            self.calls.append(
                {
                    "action": action,
                    "token": token,
                    "auto_scaling_group": params.get("AutoScalingGroupName", ""),
                    "hook": params.get("LifecycleHookName", ""),
                    "instance_id": params.get("InstanceId", ""),
                    "result": params.get("LifecycleActionResult", ""),
                    "time": time.time(),
                    "status": status,
                    "error": code,
                }
            )
        return status, code, message


def _success_xml(action: str) -> str:
    return (
        f'<{action}Response xmlns="{_XMLNS}"><{action}Result/>'
        f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )


def _error_xml(status: int, code: str, message: str) -> str:
    kind = "Sender" if status < 500 else "Receiver"
    return (
        f'<ErrorResponse xmlns="{_XMLNS}"><Error><Type>{kind}</Type><Code>{code}</Code>'
        f"<Message>{message}</Message></Error><RequestId>{uuid.uuid4()}</RequestId>"
        "</ErrorResponse>"
    )


def make_server(port: int, upstream: str, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    ledger = LifecycleLedger()
    target = urllib.parse.urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            body = self._body()
            if self.path == HEALTH_PATH:
                self._send(200, b"ok\n", "text/plain")
                return
            if self.path == CALLS_PATH:
                with ledger.lock:
                    payload = json.dumps({"calls": ledger.calls}).encode()
                self._send(200, payload, "application/json")
                return
            if self.path == FAULTS_PATH and self.command == "POST":
                fault = json.loads(body or b"{}")
                with ledger.lock:
                    ledger.faults.setdefault(str(fault["action"]), []).extend(
                        [int(fault.get("status", 500))] * int(fault.get("count", 1))
                    )
                self._send(200, b"{}", "application/json")
                return
            content_type = self.headers.get("Content-Type", "")
            if self.command == "POST" and "x-www-form-urlencoded" in content_type:
                params = dict(urllib.parse.parse_qsl(body.decode(errors="replace")))
                action = params.get("Action", "")
                if action in HANDLED:
                    status, code, message = ledger.answer(action, params)
                    xml = (
                        _success_xml(action) if status == 200 else _error_xml(status, code, message)
                    )
                    self._send(status, xml.encode(), "text/xml")
                    return
            self._forward(body)

        def _forward(self, body: bytes) -> None:
            connection = http.client.HTTPConnection(
                target.hostname or "127.0.0.1", target.port or 80, timeout=60
            )
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                connection.request(self.command, self.path, body=body or None, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError as exc:
                self._send(502, f"upstream: {exc}".encode(), "text/plain")
            finally:
                connection.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


# -- test helpers ----------------------------------------------------------------------------
def lifecycle_calls(endpoint: str) -> list[dict[str, Any]]:
    """Every lifecycle call the extension at ``endpoint`` answered, oldest first."""
    with urllib.request.urlopen(endpoint + CALLS_PATH, timeout=5) as response:
        calls: list[dict[str, Any]] = json.loads(response.read())["calls"]
    return calls


def inject_fault(endpoint: str, action: str, *, count: int = 1, status: int = 500) -> None:
    """Make the next ``count`` calls of ``action`` fail with ``status``."""
    request = urllib.request.Request(
        endpoint + FAULTS_PATH,
        data=json.dumps({"action": action, "count": count, "status": status}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--upstream", required=True, help="moto's server, e.g. http://127.0.0.1:5000"
    )
    args = parser.parse_args()
    make_server(args.port, args.upstream, args.host).serve_forever()


if __name__ == "__main__":
    main()
