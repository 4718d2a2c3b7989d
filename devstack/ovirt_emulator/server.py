"""The emulator's two HTTP servers: the engine (SSO + REST API, HTTP or HTTPS) and its admin API.

The engine side speaks what ``ovirtsdk4`` speaks: a password grant on
``/ovirt-engine/sso/oauth/token`` (JSON), then XML on ``/ovirt-engine/api`` with a bearer token.
The admin side (plain HTTP, JSON, its own port) is for tests only: inspect state, inject faults.
"Engine down" closes the engine's listening socket and every open connection (connection
refused), or answers 503 with an HTML page the way the engine's Apache proxy does.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
import re
import socket
import ssl
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from devstack.ovirt_emulator import representation as rep
from devstack.ovirt_emulator.engine import ApiFault, Engine, RequestRecord

SSO_TOKEN_PATH = "/ovirt-engine/sso/oauth/token"
SSO_LOGOUT_PATH = "/ovirt-engine/services/sso-logout"
API = rep.API_PREFIX
_ID = r"([0-9a-fA-F-]{36})"
ENGINE_MODES = ("up", "refuse", "proxy_503")

_PROXY_503_PAGE = (
    b'<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">\n<html><head>\n'
    b"<title>503 Service Unavailable</title>\n</head><body>\n<h1>Service Unavailable</h1>\n"
    b"<p>The server is temporarily unable to service your request due to maintenance downtime "
    b"or capacity problems. Please try again later.</p>\n</body></html>\n"
)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    username: str


Handler = Callable[[Engine, Request, tuple[str, ...]], tuple[int, ET.Element | None]]


def _follow(request: Request) -> set[str]:
    return {
        part.strip().replace("_", "") for part in request.query.get("follow", "").split(",") if part
    }


def _flag(request: Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


# -- API handlers -----------------------------------------------------------------------------
def get_api(engine: Engine, request: Request, _: tuple[str, ...]) -> tuple[int, ET.Element]:
    return 200, engine.read(lambda e: rep.api_root(e, request.username))


def list_vms(engine: Engine, request: Request, _: tuple[str, ...]) -> tuple[int, ET.Element]:
    search = request.query.get("search")
    followed = _follow(request)

    def render(e: Engine) -> ET.Element:
        vms = e.list_vms(search)
        limit = int(request.query.get("max", "0") or 0)
        if limit > 0:
            vms = vms[:limit]
        return rep.collection("vms", (rep.vm(e, vm, followed) for vm in vms))

    return 200, engine.read(render)


def add_vm(engine: Engine, request: Request, _: tuple[str, ...]) -> tuple[int, ET.Element]:
    body = rep.parse(request.body, "vm")
    created = engine.add_vm(
        name=rep.text_of(body, "name"),
        cluster=rep.ref_of(body, "cluster"),
        template=rep.ref_of(body, "template"),
        clone=_flag(request, "clone"),
        memory=rep.int_of(body, "memory"),
        topology=(
            rep.int_of(body, "cpu/topology/sockets"),
            rep.int_of(body, "cpu/topology/cores"),
            rep.int_of(body, "cpu/topology/threads"),
        ),
        description=rep.text_of(body, "description"),
        comment=rep.text_of(body, "comment"),
        vm_type=rep.text_of(body, "type"),
        memory_policy=(
            rep.int_of(body, "memory_policy/guaranteed"),
            rep.int_of(body, "memory_policy/max"),
            rep.bool_of(body, "memory_policy/ballooning"),
        ),
    )
    return 201, engine.read(lambda e: rep.vm(e, created, set()))


def get_vm(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    followed = _follow(request)
    return 200, engine.read(lambda e: rep.vm(e, e.get_vm(ids[0]), followed))


def update_vm(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    """The VM's ``name`` and ``description`` (other fields of the body are not emulated)."""
    body = rep.parse(request.body, "vm")
    updated = engine.update_vm(
        ids[0], name=rep.text_of(body, "name"), description=rep.text_of(body, "description")
    )
    return 200, engine.read(lambda e: rep.vm(e, updated, set()))


def remove_vm(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, None]:
    engine.remove_vm(ids[0], detach_only=_flag(request, "detach_only"))
    return 200, None


def vm_action(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    vm_id, verb = ids
    body = rep.parse(request.body, "action")
    if verb == "start":
        engine.start_vm(
            vm_id,
            use_cloud_init=bool(rep.bool_of(body, "use_cloud_init")),
            script=rep.text_of(body, "vm/initialization/custom_script"),
            host=rep.text_of(body, "vm/initialization/host_name"),
        )
    elif verb == "shutdown":
        engine.shutdown_vm(vm_id)
    elif verb == "stop":
        engine.stop_vm(vm_id)
    else:
        raise ApiFault(404, f"Unknown action {verb!r}", "Not Found")
    return 200, rep.action()


def list_attachments(
    engine: Engine, request: Request, ids: tuple[str, ...]
) -> tuple[int, ET.Element]:
    return 200, engine.read(
        lambda e: rep.collection(
            "disk_attachments", (rep.disk_attachment(e, a) for a in e.list_attachments(ids[0]))
        )
    )


def add_attachment(
    engine: Engine, request: Request, ids: tuple[str, ...]
) -> tuple[int, ET.Element]:
    body = rep.parse(request.body, "disk_attachment")
    disk_element = body.find("disk")
    disk_id = disk_element.get("id") if disk_element is not None else None
    new_disk: tuple[str, int, str | None] | None = None
    if disk_element is not None and not disk_id:
        new_disk = (
            rep.text_of(disk_element, "name") or rep.text_of(disk_element, "alias") or "disk",
            rep.int_of(disk_element, "provisioned_size") or 0,
            rep.ref_of(disk_element, "storage_domains/storage_domain")[0],
        )
    attachment = engine.attach_disk(
        ids[0],
        disk_id=disk_id,
        new_disk=new_disk,
        bootable=bool(rep.bool_of(body, "bootable")),
        active=rep.bool_of(body, "active") is not False,
        interface=rep.text_of(body, "interface"),
    )
    if engine.delays.attach_answer_s > 0:  # plugged already; the answer is slow to come
        time.sleep(engine.delays.attach_answer_s)
    return 201, engine.read(lambda e: rep.disk_attachment(e, attachment))


def get_attachment(
    engine: Engine, request: Request, ids: tuple[str, ...]
) -> tuple[int, ET.Element]:
    return 200, engine.read(lambda e: rep.disk_attachment(e, e.get_attachment(*ids)))


def remove_attachment(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, None]:
    # The engine's default is to detach only and keep the disk.
    engine.detach_disk(*ids, detach_only=request.query.get("detach_only", "true") == "true")
    return 200, None


def list_nics(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    return 200, engine.read(
        lambda e: rep.collection("nics", (rep.nic(n) for n in e.list_nics(ids[0])))
    )


def add_nic(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    body = rep.parse(request.body, "nic")
    created = engine.add_nic(
        ids[0],
        name=rep.text_of(body, "name"),
        vnic_profile_id=rep.ref_of(body, "vnic_profile")[0],
        interface=rep.text_of(body, "interface"),
    )
    return 201, rep.nic(created)


def get_nic(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    return 200, rep.nic(engine.get_nic(*ids))


def remove_nic(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, None]:
    engine.remove_nic(*ids)
    return 200, None


def list_reported_devices(
    engine: Engine, request: Request, ids: tuple[str, ...]
) -> tuple[int, ET.Element]:
    devices = engine.reported_devices(ids[0])
    return 200, rep.collection(
        "reported_devices", (rep.reported_device(ids[0], d) for d in devices)
    )


def list_templates(engine: Engine, request: Request, _: tuple[str, ...]) -> tuple[int, ET.Element]:
    found = engine.list_templates(request.query.get("search"))
    return 200, rep.collection("templates", (rep.template(t) for t in found))


def get_template(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    return 200, rep.template(engine.get_template(ids[0]))


def list_clusters(engine: Engine, request: Request, _: tuple[str, ...]) -> tuple[int, ET.Element]:
    return 200, engine.read(
        lambda e: rep.collection("clusters", (rep.cluster(c) for c in e.clusters.values()))
    )


def get_cluster(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    def render(e: Engine) -> ET.Element:
        found = e.clusters.get(ids[0])
        if found is None:
            raise ApiFault(404, f"Entity not found: Cluster: {ids[0]}", "Not Found")
        return rep.cluster(found)

    return 200, engine.read(render)


def list_data_centers(
    engine: Engine, request: Request, _: tuple[str, ...]
) -> tuple[int, ET.Element]:
    return 200, engine.read(
        lambda e: rep.collection(
            "data_centers", (rep.data_center(d) for d in e.data_centers.values())
        )
    )


def list_disks(engine: Engine, request: Request, _: tuple[str, ...]) -> tuple[int, ET.Element]:
    return 200, engine.read(
        lambda e: rep.collection(
            "disks", (rep.disk(e, d) for d in e.list_disks(request.query.get("search")))
        )
    )


def add_disk(engine: Engine, request: Request, _: tuple[str, ...]) -> tuple[int, ET.Element]:
    body = rep.parse(request.body, "disk")
    created = engine.add_disk(
        rep.text_of(body, "name") or rep.text_of(body, "alias") or "disk",
        rep.int_of(body, "provisioned_size") or 0,
        rep.ref_of(body, "storage_domains/storage_domain")[0],
        description=rep.text_of(body, "description") or "",
        sparse=rep.text_of(body, "sparse") != "false",
    )
    return 201, engine.read(lambda e: rep.disk(e, created))


def get_disk(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    return 200, engine.read(lambda e: rep.disk(e, e.get_disk(ids[0])))


def update_disk(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, ET.Element]:
    """Grow (``provisioned_size``) and/or rename (``alias``, ``name``) and describe."""
    body = rep.parse(request.body, "disk")
    size = rep.int_of(body, "provisioned_size")
    alias = rep.text_of(body, "alias") or rep.text_of(body, "name")
    description = rep.text_of(body, "description")
    updated = engine.get_disk(ids[0])
    if alias is not None or description is not None:
        updated = engine.update_disk(ids[0], alias=alias, description=description)
    if size is not None:
        updated = engine.resize_disk(ids[0], size)
    return 200, engine.read(lambda e: rep.disk(e, updated))


def remove_disk(engine: Engine, request: Request, ids: tuple[str, ...]) -> tuple[int, None]:
    engine.remove_disk(ids[0])
    return 200, None


def list_storage_domains(
    engine: Engine, request: Request, _: tuple[str, ...]
) -> tuple[int, ET.Element]:
    found = engine.list_storage_domains(request.query.get("search"))
    return 200, rep.collection("storage_domains", (rep.storage_domain(sd) for sd in found))


def get_storage_domain(
    engine: Engine, request: Request, ids: tuple[str, ...]
) -> tuple[int, ET.Element]:
    found = next((sd for sd in engine.list_storage_domains(None) if sd.id == ids[0]), None)
    if found is None:
        raise ApiFault(404, f"Entity not found: StorageDomain: {ids[0]}", "Not Found")
    return 200, rep.storage_domain(found)


def list_vnic_profiles(
    engine: Engine, request: Request, _: tuple[str, ...]
) -> tuple[int, ET.Element]:
    return 200, engine.read(
        lambda e: rep.collection(
            "vnic_profiles", (rep.vnic_profile(p) for p in e.vnic_profiles.values())
        )
    )


def get_vnic_profile(
    engine: Engine, request: Request, ids: tuple[str, ...]
) -> tuple[int, ET.Element]:
    def render(e: Engine) -> ET.Element:
        found = e.vnic_profiles.get(ids[0])
        if found is None:
            raise ApiFault(404, f"Entity not found: VnicProfile: {ids[0]}", "Not Found")
        return rep.vnic_profile(found)

    return 200, engine.read(render)


#: ``(method, path pattern below /ovirt-engine/api, handler)``; the pattern is the route label.
ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "", get_api),
    ("GET", "/vms", list_vms),
    ("POST", "/vms", add_vm),
    ("GET", f"/vms/{_ID}", get_vm),
    ("PUT", f"/vms/{_ID}", update_vm),
    ("DELETE", f"/vms/{_ID}", remove_vm),
    ("POST", f"/vms/{_ID}/(start|stop|shutdown)", vm_action),
    ("GET", f"/vms/{_ID}/diskattachments", list_attachments),
    ("POST", f"/vms/{_ID}/diskattachments", add_attachment),
    ("GET", f"/vms/{_ID}/diskattachments/{_ID}", get_attachment),
    ("DELETE", f"/vms/{_ID}/diskattachments/{_ID}", remove_attachment),
    ("GET", f"/vms/{_ID}/nics", list_nics),
    ("POST", f"/vms/{_ID}/nics", add_nic),
    ("GET", f"/vms/{_ID}/nics/{_ID}", get_nic),
    ("DELETE", f"/vms/{_ID}/nics/{_ID}", remove_nic),
    ("GET", f"/vms/{_ID}/reporteddevices", list_reported_devices),
    ("GET", "/templates", list_templates),
    ("GET", f"/templates/{_ID}", get_template),
    ("GET", "/clusters", list_clusters),
    ("GET", f"/clusters/{_ID}", get_cluster),
    ("GET", "/datacenters", list_data_centers),
    ("GET", "/disks", list_disks),
    ("POST", "/disks", add_disk),
    ("GET", f"/disks/{_ID}", get_disk),
    ("PUT", f"/disks/{_ID}", update_disk),
    ("DELETE", f"/disks/{_ID}", remove_disk),
    ("GET", "/storagedomains", list_storage_domains),
    ("GET", f"/storagedomains/{_ID}", get_storage_domain),
    ("GET", "/vnicprofiles", list_vnic_profiles),
    ("GET", f"/vnicprofiles/{_ID}", get_vnic_profile),
]
_COMPILED = [(method, re.compile(f"^{pattern}/?$"), handler) for method, pattern, handler in ROUTES]
_ANY_ID = re.compile(
    r"/[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def route_label(path: str) -> str:
    """The path with every UUID replaced by ``{id}``, e.g. ``/ovirt-engine/api/vms/{id}/start``."""
    return _ANY_ID.sub("/{id}", path.rstrip("/"))


# -- HTTP plumbing ----------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        tls: ssl.SSLContext | None,
    ) -> None:
        self.tls = tls
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        raw, address = super().get_request()
        if self.tls is None:
            return raw, address
        # The TLS handshake happens on first read, in the request's own thread.
        return self.tls.wrap_socket(raw, server_side=True, do_handshake_on_connect=False), address

    def drop_connections(self) -> None:
        with self.connections_lock:
            for conn in list(self.open_connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)


class EngineServer:
    """The engine's HTTP(S) endpoint; ``engine_down``/``engine_up`` close and reopen it."""

    def __init__(
        self, engine: Engine, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> None:
        self.engine = engine
        self.host = host
        self.port = port
        self.tls = tls
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def start(self) -> EngineServer:
        with self._lock:
            if self._server is None:
                server = _Server((self.host, self.port), _engine_handler(self.engine), self.tls)
                self.port = int(server.server_address[1])
                self._server = server
                self._thread = threading.Thread(
                    target=server.serve_forever, name="ovirt-engine", daemon=True
                )
                self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            if server is not None:
                server.shutdown()
                server.server_close()
                server.drop_connections()

    def set_mode(self, mode: str) -> None:
        if mode not in ENGINE_MODES:
            raise ValueError(f"engine mode must be one of {ENGINE_MODES}")
        self.engine.engine_mode = mode
        if mode == "refuse":
            self.stop()
        else:
            self.start()


def _engine_handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class EngineHandler(BaseHTTPRequestHandler):
        _unrecorded: RequestRecord | None = None
        protocol_version = "HTTP/1.1"
        server_version = "Apache"
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
            try:
                super().handle()
            except (OSError, ssl.SSLError):
                self.close_connection = True

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, format: str, *args: object) -> None:
            pass

        # -- dispatch ----------------------------------------------------------------------
        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            # recorded by _send, before the answer is written: a client that has its answer
            # finds its request in the admin API's counts
            self._unrecorded = RequestRecord(
                method=method,
                route=route_label(path),
                path=path,
                query=parts.query,
                user_agent=self.headers.get("User-Agent", ""),
                status=0,
            )
            self._answer(method, path, query, body)

        def _answer(self, method: str, path: str, query: dict[str, str], body: bytes) -> int:
            if engine.engine_mode == "proxy_503":
                return self._send(503, _PROXY_503_PAGE, "text/html; charset=iso-8859-1")
            if path == SSO_TOKEN_PATH and method == "POST":
                return self._sso_token(body)
            if path == SSO_LOGOUT_PATH and method == "POST":
                form = parse_qs(body.decode("utf-8", "replace"))
                engine.revoke_token((form.get("token") or [""])[0])
                return self._json(200, {})
            if not path.startswith(API):
                return self._send(404, b"Not Found\n", "text/html; charset=iso-8859-1")
            username = self._authenticated_user()
            if username is None:
                # No fault body: the SDK then raises AuthError (and first retries with a new
                # token, the way it recovers from an expired one).
                return self._send(401, b"", "application/xml;charset=UTF-8")
            request = Request(method, path[len(API) :], query, body, username)
            try:
                for route_method, pattern, handler in _COMPILED:
                    match = pattern.match(request.path)
                    if match is not None and route_method == method:
                        code, element = handler(engine, request, match.groups())
                        payload = rep.to_bytes(element) if element is not None else b""
                        return self._send(code, payload, "application/xml;charset=UTF-8")
                raise ApiFault(404, f"No such resource: {method} {path}", "Not Found")
            except ApiFault as refused:
                return self._send(
                    refused.status,
                    rep.to_bytes(rep.fault(refused)),
                    "application/xml;charset=UTF-8",
                )
            except Exception as exc:  # an emulator bug: answer like a failing engine
                failed = ApiFault(500, f"{type(exc).__name__}: {exc}", "Internal Server Error")
                return self._send(
                    500, rep.to_bytes(rep.fault(failed)), "application/xml;charset=UTF-8"
                )

        def _authenticated_user(self) -> str | None:
            header = self.headers.get("Authorization", "")
            scheme, _, credentials = header.partition(" ")
            if scheme.lower() == "bearer" and engine.token_valid(credentials.strip()):
                return engine.username
            if scheme.lower() == "basic":
                try:
                    user, _, password = base64.b64decode(credentials).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    return None
                if user == engine.username and password == engine.password:
                    return user
            return None

        def _sso_token(self, body: bytes) -> int:
            form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
            if form.get("grant_type") != "password":
                return self._json(
                    400,
                    {
                        "error_code": "unsupported_grant_type",
                        "error": f"grant type {form.get('grant_type')!r} is not supported",
                    },
                )
            username = form.get("username", "")
            token = engine.issue_token(username, form.get("password", ""))
            if token is None:
                return self._json(
                    400,
                    {
                        "error_code": "access_denied",
                        "error": (
                            f"Cannot authenticate user '{username}': "
                            "The username or password is incorrect.."
                        ),
                    },
                )
            return self._json(
                200,
                {
                    "access_token": token,
                    "scope": "ovirt-app-api ovirt-ext=token-info:authz-search",
                    "exp": "9223372036854775807",
                    "token_type": "bearer",
                },
            )

        def _json(self, code: int, payload: dict[str, Any]) -> int:
            return self._send(code, json.dumps(payload).encode(), "application/json")

        def _send(self, code: int, payload: bytes, content_type: str) -> int:
            pending, self._unrecorded = self._unrecorded, None
            if pending is not None:
                engine.record(dataclasses.replace(pending, status=code))
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if payload:
                self.wfile.write(payload)
            return code

    return EngineHandler


# -- admin API --------------------------------------------------------------------------------
class AdminServer:
    """JSON on plain HTTP for tests: ``/state``, ``/requests``, faults, reset."""

    def __init__(self, engine: Engine, engine_server: EngineServer, host: str, port: int) -> None:
        self.engine = engine
        self.engine_server = engine_server
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="ovirt-admin", daemon=True
        )

    def start(self) -> AdminServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, method: str, path: str, query: dict[str, str], payload: Any) -> Any:
        engine = self.engine
        if method == "GET" and path == "/healthz":
            return {"ok": True}
        if method == "GET" and path == "/state":
            return engine.snapshot()
        if method == "GET" and path == "/requests":
            return engine.recent_requests(int(query.get("limit", "1000")))
        if method == "POST" and path == "/requests/clear":
            engine.clear_requests()
            return {}
        if method == "POST" and path == "/engine":
            self.engine_server.set_mode(str(payload.get("mode", "up")))
            return {"mode": engine.engine_mode}
        if method == "POST" and path == "/vm-status":
            vm = engine.force_vm_status(str(payload["name"]), str(payload["status"]))
            return {"id": vm.id, "status": vm.status}
        if method == "POST" and path == "/tokens/revoke":
            engine.revoke_all_tokens()
            return {}
        if method == "POST" and path == "/password":
            engine.set_password(str(payload["password"]))
            return {}
        if method == "POST" and path == "/reset":
            engine.reset()
            self.engine_server.set_mode("up")
            return {}
        raise KeyError(path)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        admin = self

        class AdminHandler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                try:
                    payload = json.loads(raw) if raw else {}
                    code, answer = 200, admin.handle(method, parts.path, query, payload)
                except KeyError as exc:
                    code, answer = 404, {"error": f"not found: {exc}"}
                except (ValueError, TypeError) as exc:
                    code, answer = 400, {"error": str(exc)}
                body = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return AdminHandler
