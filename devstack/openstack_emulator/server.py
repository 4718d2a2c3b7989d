"""The emulator's HTTP side: one listener per service (as a real cloud has) and the admin API.

Each service answers on its own port, so "service down" closes that port (connection refused)
while the others keep working; ``503`` answers as a load balancer in front of a dead API does
(HTML), ``500`` with the service's own error body. A request goes: region prefix (a second
region's endpoints are the same listeners under ``/<region>``) → service mode → injected fault
(latency and/or status) → route → token (``X-Auth-Token``; 401 with ``WWW-Authenticate``; an
unscoped token is 403 outside Keystone) → microversion (406 out of range) → handler under the
cloud lock. Every request is recorded as ``"<METHOD> <service> <route label>"`` with its region.
The admin API (plain HTTP, JSON) is for tests only.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from devstack.openstack_emulator.api import Reply, Request, Service, dumps, route_label
from devstack.openstack_emulator.cloud import (
    ApiFault,
    HoldTrigger,
    InjectedFault,
    RequestRecord,
)
from devstack.openstack_emulator.state import OpenStack

SERVICE_MODES = ("up", "refuse", "503", "500")
_HTML_503 = (
    b"<html><body><h1>503 Service Unavailable</h1>\n"
    b"No server is available to handle this request.\n</body></html>\n"
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def drop_connections(self) -> None:
        with self.connections_lock:
            for conn in list(self.open_connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)


class ServiceServer:
    """One service's endpoint; ``set_mode("refuse")`` closes it, ``up`` reopens the same port."""

    def __init__(self, openstack: OpenStack, name: str, host: str, port: int) -> None:
        self.openstack = openstack
        self.name = name
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ServiceServer:
        with self._lock:
            if self._server is None:
                server = _Server((self.host, self.port), _handler(self))
                self.port = int(server.server_address[1])
                self._server = server
                threading.Thread(
                    target=server.serve_forever, name=f"os-{self.name}", daemon=True
                ).start()
        return self

    def stop(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            if server is not None:
                server.shutdown()
                server.server_close()
                server.drop_connections()

    def set_mode(self, mode: str) -> None:
        if mode not in SERVICE_MODES:
            raise ValueError(f"mode must be one of {SERVICE_MODES}")
        with self.openstack.cloud.lock:
            self.openstack.cloud.service_modes[self.name] = mode
        if mode == "refuse":
            self.stop()
        else:
            self.start()

    # -- one request -----------------------------------------------------------------------
    def serve(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        openstack = self.openstack
        cloud = openstack.cloud
        service: Service = openstack.services[self.name]
        parts = urlsplit(raw_path)
        path = unquote(parts.path).rstrip("/")
        # A second region's endpoints are these listeners under a path prefix (see identity).
        region, base_url = openstack.identity.options.region, self.url
        for prefix, named in openstack.identity.region_prefixes().items():
            if path == prefix or path.startswith(f"{prefix}/"):
                path, region, base_url = path[len(prefix) :], named, f"{self.url}{prefix}"
                break
        label = route_label(path)
        query = parse_qs(parts.query, keep_blank_values=True)
        request_id = f"req-{uuid.uuid4()}"
        status, reply_headers, payload, version = 500, {}, b"", None
        try:
            mode = cloud.service_modes.get(self.name, "up")
            if mode == "503":
                status, reply_headers, payload = 503, {"Content-Type": "text/html"}, _HTML_503
                return status, reply_headers, payload
            if mode == "500":
                raise ApiFault(
                    500,
                    (
                        "The server has either erred or is incapable of performing "
                        "the requested operation."
                    ),
                )
            fault = cloud.injected(self.name, method, label)
            if fault is not None:
                if fault.latency_s:
                    time.sleep(fault.latency_s)
                if fault.status:
                    extra = (
                        {"Retry-After": str(fault.retry_after_s)}
                        if fault.retry_after_s is not None
                        else {}
                    )
                    raise ApiFault(fault.status, fault.message, headers=extra)
            route, groups = service.match(method, path)
            request = Request(
                method=method,
                path=path,
                query=query,
                headers=headers,
                body=json.loads(body) if body.strip() else None,
                base_url=base_url,
            )
            if not route.public:
                token_id = next((v for k, v in headers.items() if k.lower() == "x-auth-token"), "")
                with cloud.lock:
                    request.token = openstack.identity.authenticate(token_id)
                if request.token is None:
                    auth_url = f"{openstack.identity.endpoints.get('identity', '')}/v3"
                    raise ApiFault(
                        401,
                        "The request you have made requires authentication.",
                        "Unauthorized",
                        headers={"WWW-Authenticate": f'Keystone uri="{auth_url}"'},
                    )
                if not request.token.project_id and self.name != "identity":
                    raise ApiFault(403, "A project-scoped token is required.", "Forbidden")
            version = service.negotiate(headers)
            request.microversion = version
            with cloud.lock:
                cloud.advance()
                reply: Reply = route.handler(request, *groups)
                cloud.answered(self.name, method, label, reply.status)
            status = reply.status
            reply_headers = {**reply.headers}
            if reply.body is not None:
                payload = reply.body if isinstance(reply.body, bytes) else dumps(reply.body)
                reply_headers["Content-Type"] = "application/json"
        except ApiFault as refused:
            status = refused.status
            reply_headers = {"Content-Type": "application/json", **refused.headers}
            body_doc = (
                openstack.identity.fault_body(refused)
                if status == 401
                else service.fault_body(refused)
            )
            payload = dumps(body_doc)
        except json.JSONDecodeError as exc:
            status = 400
            payload = dumps(service.fault_body(ApiFault(400, f"Malformed request body: {exc}")))
            reply_headers = {"Content-Type": "application/json"}
        except Exception as exc:  # an emulator bug: answer like a failing service
            status = 500
            payload = dumps(service.fault_body(ApiFault(500, f"{type(exc).__name__}: {exc}")))
            reply_headers = {"Content-Type": "application/json"}
        finally:
            cloud.record(
                RequestRecord(
                    service=self.name,
                    method=method,
                    route=label,
                    path=path,
                    query=parts.query,
                    status=status,
                    user_agent=headers.get("User-Agent", ""),
                    microversion=f"{version[0]}.{version[1]}" if version else "",
                    region=region,
                )
            )
        reply_headers.update(service.version_headers(version))
        reply_headers["X-Openstack-Request-Id"] = request_id
        return status, reply_headers, payload


def _handler(service_server: ServiceServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "openstack-emulator"
        sys_version = ""

        def setup(self) -> None:
            super().setup()
            server = self.server
            assert isinstance(server, _Server)
            with server.connections_lock:
                server.open_connections.add(self.connection)

        def finish(self) -> None:
            server = self.server
            assert isinstance(server, _Server)
            with server.connections_lock:
                server.open_connections.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def handle(self) -> None:
            with contextlib.suppress(OSError):
                super().handle()

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, headers, payload = service_server.serve(
                self.command, self.path, dict(self.headers.items()), body
            )
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if payload and self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class Servers:
    """Every service's listener; the identity service's catalog points at the others."""

    def __init__(self, openstack: OpenStack, host: str, ports: dict[str, int]) -> None:
        self.openstack = openstack
        self.by_name = {
            name: ServiceServer(openstack, name, host, ports.get(name, 0))
            for name in openstack.services
        }

    def start(self) -> Servers:
        for server in self.by_name.values():
            server.start()
        self.openstack.identity.endpoints = {n: s.url for n, s in self.by_name.items()}
        return self

    def stop(self) -> None:
        for server in self.by_name.values():
            server.stop()

    def set_mode(self, name: str, mode: str) -> None:
        if name not in self.by_name:
            raise ValueError(f"service must be one of {sorted(self.by_name)}")
        self.by_name[name].set_mode(mode)

    def reset_modes(self) -> None:
        for server in self.by_name.values():
            server.set_mode("up")


# -- admin API --------------------------------------------------------------------------------
class AdminServer:
    """JSON on plain HTTP for tests: state, request counts, faults, seeding, reset."""

    def __init__(self, openstack: OpenStack, servers: Servers, host: str, port: int) -> None:
        self.openstack = openstack
        self.servers = servers
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="os-admin", daemon=True
        )

    def start(self) -> AdminServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, method: str, path: str, query: dict[str, str], payload: Any) -> Any:
        openstack = self.openstack
        cloud = openstack.cloud
        if method == "GET" and path == "/healthz":
            return {"ok": True}
        if method == "GET" and path == "/state":
            return openstack.snapshot()
        if method == "GET" and path == "/endpoints":
            return {name: server.url for name, server in self.servers.by_name.items()}
        if method == "GET" and path == "/requests":
            limit = int(query.get("limit", "1000"))
            with cloud.lock:
                return [r.__dict__ for r in list(cloud.recent)[-limit:]]
        if method == "POST" and path == "/requests/clear":
            cloud.clear_requests()
            return {}
        if method == "POST" and path == "/service":
            self.servers.set_mode(str(payload["service"]), str(payload.get("mode", "up")))
            return {"modes": dict(cloud.service_modes)}
        if method == "POST" and path == "/faults":
            known = {f.name for f in fields(InjectedFault)}
            openstack.inject(InjectedFault(**{k: v for k, v in payload.items() if k in known}))
            return {}
        if method == "POST" and path == "/faults/clear":
            openstack.clear_faults()
            return {}
        if method == "POST" and path == "/delays":
            return openstack.set_delays({k: float(v) for k, v in payload.items()}).__dict__
        if method == "POST" and path == "/hold":
            return {"held": openstack.hold(str(payload["kind"]), bool(payload.get("hold", True)))}
        if method == "POST" and path == "/hold-after":
            known = {f.name for f in fields(HoldTrigger)}
            with cloud.lock:
                cloud.hold_triggers.append(
                    HoldTrigger(**{k: v for k, v in payload.items() if k in known})
                )
            return {}
        if method == "POST" and path == "/quotas":
            return {"quotas": openstack.set_quotas(dict(payload))}
        if method == "POST" and path == "/no-valid-host":
            flavor, enabled = str(payload["flavor"]), bool(payload.get("enabled", True))
            return {"flavors": openstack.set_no_valid_host(flavor, enabled)}
        if method == "POST" and path == "/fail-next":
            openstack.fail_next(str(payload["kind"]), int(payload.get("count", 1)))
            return {}
        if method == "POST" and path == "/server-status":
            server = openstack.force_server_status(str(payload["ref"]), str(payload["status"]))
            return {"id": server["id"], "status": server["status"]}
        if method == "POST" and path == "/volume-status":
            volume = openstack.force_volume_status(str(payload["ref"]), str(payload["status"]))
            return {"id": volume["id"], "status": volume["status"]}
        if method == "POST" and path == "/loadbalancer-status":
            lb = openstack.force_lb_status(str(payload["ref"]), str(payload["status"]))
            return {"id": lb["id"], "provisioning_status": lb["provisioning_status"]}
        if method == "POST" and path == "/servers":
            return openstack.seed_servers(
                int(payload["count"]),
                prefix=str(payload.get("prefix", "node")),
                start=int(payload.get("start", 0)),
                flavor=str(payload.get("flavor", "m1.small")),
                network=str(payload.get("network", "private")),
                zones=payload.get("zones"),
                metadata=payload.get("metadata"),
            )
        if method == "POST" and path == "/tokens/revoke":
            with cloud.lock:
                openstack.identity.revoke_all()
            return {}
        if method == "POST" and path == "/password":
            with cloud.lock:
                openstack.identity.set_password(str(payload["password"]))
            return {}
        if method == "POST" and path == "/reset":
            self.servers.reset_modes()
            openstack.reset()
            openstack.identity.endpoints = {n: s.url for n, s in self.servers.by_name.items()}
            return {}
        raise KeyError(path)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        admin = self

        class AdminHandler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                try:
                    payload = json.loads(raw) if raw else {}
                    code, answer = 200, admin.handle(self.command, parts.path, query, payload)
                except KeyError as exc:
                    code, answer = 404, {"error": f"not found: {exc}"}
                except ApiFault as exc:
                    code, answer = exc.status, {"error": exc.message}
                except (ValueError, TypeError) as exc:
                    code, answer = 400, {"error": str(exc)}
                body = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

            def log_message(self, format: str, *args: object) -> None:
                pass

        return AdminHandler
