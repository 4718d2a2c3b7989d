"""A real Keystone (30.0.0 from PyPI) on sqlite, to check the OpenStack emulator's identity side.

Keystone runs in a venv of its own, ``<cache>/keystone-30.0.0-<digest>/venv`` (the cache of
:func:`devstack.gotools.cache_root`; the digest covers :data:`REQUIREMENTS`), made once with the
project's ``uv`` from the pinned ``keystone-requirements.txt``: its pins would clash with the
product's venv, so it is never installed there. The database is initialised once too
(``keystone-manage db_sync``, ``fernet_setup``, ``credential_setup``, ``bootstrap`` with an admin;
tens of seconds on a busy machine) into ``<cache>/…/initialised-<conf digest>`` and copied for
every run, so a run costs the copy, Keystone's start and the seeding requests (seconds).

:func:`keystone` serves a copy on ``127.0.0.1:<free port>`` with ``wsgiref`` in a child process
that dies with its parent (:class:`~devstack.process.ManagedProcess`), then seeds it through the
Identity API as the admin: two regions with identity, compute and network endpoints in each (the
compute and network URLs answer nothing: only the catalog is checked), a second domain with a
project and a user holding ``member`` on it, and the user's application credential.

Rules: a file lock per cache folder makes concurrent callers wait for one install; secrets go
to the children through files and the environment, never argv. gunicorn cannot serve Keystone
(oslo.config parses the server's argv), hence ``sys.argv`` and ``OS_KEYSTONE_CONFIG_FILES``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keystoneauth1 import session as ksa_session
from keystoneauth1.identity import v3

from devstack.gotools import cache_root
from devstack.process import ManagedProcess, free_port, http_ok

VERSION = "30.0.0"
REQUIREMENTS = Path(__file__).with_name("keystone-requirements.txt")
ADMIN_PASSWORD = "keystone-admin-pass"  # a throw-away test cloud's admin
PASSWORD = "keystone-user-pass"
APP_CREDENTIAL_SECRET = "keystone-app-credential-secret"
REGIONS = ("RegionOne", "RegionTwo")
DOMAIN = "tenants"
USERNAME = "deployer"
PROJECT = "kube"
APP_CREDENTIAL_NAME = "ccm"

#: Run by Keystone's interpreter: ``<conf> <port>``; serves the public WSGI app until killed.
_SERVE = """\
import os, sys
conf, port = sys.argv[1], int(sys.argv[2])
sys.argv = ["keystone", "--config-file", conf]
os.environ["OS_KEYSTONE_CONFIG_FILES"] = conf
from wsgiref.simple_server import WSGIRequestHandler, make_server
from keystone.server.wsgi import initialize_public_application
class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass
make_server("127.0.0.1", port, initialize_public_application(), handler_class=Quiet).serve_forever()
"""

_CONF = """\
[DEFAULT]
log_file = {root}/keystone.log
[database]
connection = sqlite:///{root}/keystone.db
[fernet_tokens]
key_repository = {root}/fernet-keys
[fernet_receipts]
key_repository = {root}/fernet-keys
[credential]
key_repository = {root}/credential-keys
[token]
provider = fernet
[identity]
# The fewest bcrypt rounds Keystone allows: each login and secret costs ~1 ms, not ~0.3 s.
password_hash_rounds = 4
"""


@dataclass(frozen=True)
class KeystoneEndpoint:
    """Where the Keystone answers and the seeded account in the second domain."""

    auth_url: str  # http://127.0.0.1:<port>/v3
    regions: tuple[str, ...]
    domain: str
    domain_id: str
    username: str
    user_id: str
    password: str = field(repr=False)
    project: str
    project_id: str
    app_credential_id: str
    app_credential_name: str
    app_credential_secret: str = field(repr=False)


def _log(message: str) -> None:
    print(f"[cloudloop keystone] {message}", file=sys.stderr, flush=True)


def _home() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return cache_root() / f"keystone-{VERSION}-{digest}"


def _uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise RuntimeError("uv is needed to install Keystone; run `make .venv/.installed-stamp`")
    return found


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{(result.stdout + result.stderr)[-4000:]}")


def _install(venv: Path) -> None:
    started = time.monotonic()
    _log(f"installing Keystone {VERSION} into {venv} (uv, from PyPI or the uv cache)")
    shutil.rmtree(venv, ignore_errors=True)
    _run([_uv(), "venv", "-q", "--python", sys.executable, str(venv)], "uv venv")
    _run(
        [_uv(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-r",
         str(REQUIREMENTS)],
        f"installing Keystone {VERSION}",
    )  # fmt: skip
    _log(f"installed Keystone in {time.monotonic() - started:.0f}s")


def _initialise(venv: Path, target: Path) -> None:
    """db_sync, key repositories and bootstrap (admin, roles) into ``target``."""
    started = time.monotonic()
    staging = target.with_name(f"{target.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    conf = staging / "keystone.conf"
    conf.write_text(_CONF.format(root=staging))
    manage = [str(venv / "bin" / "keystone-manage"), "--config-file", str(conf)]
    owner = ["--keystone-user", str(os.getuid()), "--keystone-group", str(os.getgid())]
    _run([*manage, "db_sync"], "keystone-manage db_sync")
    _run([*manage, "fernet_setup", *owner], "keystone-manage fernet_setup")
    _run([*manage, "credential_setup", *owner], "keystone-manage credential_setup")
    env = {**os.environ, "OS_BOOTSTRAP_PASSWORD": ADMIN_PASSWORD}
    result = subprocess.run(
        [*manage, "bootstrap"], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        raise RuntimeError(f"keystone-manage bootstrap failed:\n{result.stderr[-4000:]}")
    conf.unlink()
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    _log(f"initialised Keystone's database in {time.monotonic() - started:.0f}s")


def ensure_installed() -> tuple[Path, Path]:
    """Keystone's venv and its initialised state (made on first use, under a file lock)."""
    home = _home()
    home.mkdir(parents=True, exist_ok=True)
    conf_digest = hashlib.sha256(_CONF.encode()).hexdigest()[:8]
    venv, initialised = home / "venv", home / f"initialised-{conf_digest}"
    with open(home.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".installed").exists():
            _install(venv)
            (venv / ".installed").touch()
        if not (initialised / "keystone.db").exists():
            _initialise(venv, initialised)
    return venv, initialised


def keystone_process(venv: Path, state_dir: Path, port: int) -> ManagedProcess:
    """A not yet started Keystone serving ``state_dir`` (a copy of the initialised state)."""
    conf = state_dir / "keystone.conf"
    conf.write_text(_CONF.format(root=state_dir))
    return ManagedProcess(
        "keystone",
        [str(venv / "bin" / "python"), "-c", _SERVE, str(conf), str(port)],
        log_dir=state_dir,
        ready=lambda: http_ok(f"http://127.0.0.1:{port}/v3"),
        env={**os.environ, "OS_KEYSTONE_CONFIG_FILES": str(conf)},
    )


class _Admin:
    """The bootstrap admin's requests (absolute URLs, raising on errors)."""

    def __init__(self, auth_url: str) -> None:
        self.auth_url = auth_url
        self.session = ksa_session.Session(
            auth=v3.Password(
                auth_url=auth_url,
                username="admin",
                password=ADMIN_PASSWORD,
                user_domain_id="default",
                project_name="admin",
                project_domain_id="default",
            ),
            timeout=30,
        )

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = self.session.post(f"{self.auth_url}{path}", json=body).json()
        return answer

    def get(self, path: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.session.get(f"{self.auth_url}{path}").json()
        return answer


def seed(auth_url: str) -> KeystoneEndpoint:
    """Regions, catalog, the second domain's project, user, role and application credential."""
    admin = _Admin(auth_url)
    for region in REGIONS:
        admin.post("/regions", {"region": {"id": region}})
    for service_type, name in (
        ("identity", "keystone"),
        ("compute", "nova"),
        ("network", "neutron"),
    ):
        service = admin.post("/services", {"service": {"type": service_type, "name": name}})
        for region in REGIONS:
            for interface in ("public", "internal"):
                # Port 9 (discard) answers nothing: only the catalog is looked at.
                url = (
                    auth_url
                    if service_type == "identity"
                    else f"http://127.0.0.1:9/{region}/{name}"
                )
                admin.post(
                    "/endpoints",
                    {
                        "endpoint": {
                            "service_id": service["service"]["id"],
                            "region_id": region,
                            "interface": interface,
                            "url": url,
                        }
                    },
                )
    domain = admin.post("/domains", {"domain": {"name": DOMAIN}})["domain"]
    project = admin.post("/projects", {"project": {"name": PROJECT, "domain_id": domain["id"]}})
    user = admin.post(
        "/users", {"user": {"name": USERNAME, "domain_id": domain["id"], "password": PASSWORD}}
    )["user"]
    [member] = admin.get("/roles?name=member")["roles"]
    project_id = project["project"]["id"]
    admin.session.put(f"{auth_url}/projects/{project_id}/users/{user['id']}/roles/{member['id']}")
    own = ksa_session.Session(
        auth=v3.Password(
            auth_url=auth_url,
            user_id=user["id"],
            password=PASSWORD,
            project_id=project_id,
        ),
        timeout=30,
    )
    credential = own.post(
        f"{auth_url}/users/{user['id']}/application_credentials",
        json={
            "application_credential": {
                "name": APP_CREDENTIAL_NAME,
                "secret": APP_CREDENTIAL_SECRET,
            }
        },
    ).json()["application_credential"]
    return KeystoneEndpoint(
        auth_url=auth_url,
        regions=REGIONS,
        domain=DOMAIN,
        domain_id=str(domain["id"]),
        username=USERNAME,
        user_id=str(user["id"]),
        password=PASSWORD,
        project=PROJECT,
        project_id=str(project_id),
        app_credential_id=str(credential["id"]),
        app_credential_name=APP_CREDENTIAL_NAME,
        app_credential_secret=APP_CREDENTIAL_SECRET,
    )


@contextmanager
def keystone(
    state_dir: Path | None = None, *, timeout_s: float = 120.0
) -> Iterator[KeystoneEndpoint]:
    """A seeded Keystone of its own (installed and initialised on first use), stopped after."""
    venv, initialised = ensure_installed()
    with tempfile.TemporaryDirectory(prefix="keystone-", dir=state_dir) as root:
        run_dir = Path(root) / "state"
        shutil.copytree(initialised, run_dir)
        port = free_port()
        process = keystone_process(venv, run_dir, port)
        started = time.monotonic()
        process.start()
        try:
            process.wait_ready(timeout_s)
            ready = time.monotonic() - started
            endpoint = seed(f"http://127.0.0.1:{port}/v3")
            _log(
                f"Keystone {VERSION} up in {ready:.1f}s, "
                f"seeded in {time.monotonic() - started - ready:.1f}s"
            )
            yield endpoint
        finally:
            process.stop()
