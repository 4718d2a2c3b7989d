"""The production-shaped Temporal: the server built from its Go module on PostgreSQL.

``StackOptions(temporal_server="postgres")`` runs Temporal as users deploy it instead of the
``temporal`` CLI's dev server: ``temporal-server`` (``go.temporal.io/server/cmd/server``, built into
the shared tool cache by :mod:`.gotools`) with the ``postgres12`` SQL plugin for both persistence
and visibility (standard visibility on SQL, no Elasticsearch), against a PostgreSQL from Debian's
packages (``/usr/lib/postgresql/<major>/bin``) that the stack starts for itself.

Rules:

- **PostgreSQL** is a fresh cluster per stack (``initdb``), listening on ``127.0.0.1`` at a free
  port and on a Unix socket in its own folder. ``initdb`` and ``postgres`` refuse to run as root:
  as root, both run as the ``postgres`` user Debian's package creates, through ``setpriv`` (which
  also re-arms the parent-death signal that the change of user clears), and the cluster lives in a
  folder of its own under the system temporary folder (a test's ``tmp_path`` is root-only), removed
  at stop. ``synchronous_commit=off``, as the dev server's SQLite runs ``synchronous=normal``: a
  crash of the database loses the last commits, never its consistency; a crash of Temporal loses
  nothing. The database is trusted on loopback (no password), the stack's only client.
- **Schema**: ``temporal-sql-tool`` (``cmd/tools/sql`` of the same module) creates the
  ``temporal`` and ``temporal_visibility`` databases, ``setup-schema -v 0.0`` then
  ``update-schema`` to the newest version of the module's ``schema/postgresql/v12`` folders (the
  tool's embedded copy of them, ``--schema-name``), as the server's docs and Helm chart do.
- **Server**: one process with the frontend, history, matching and worker services, every gRPC
  and membership port free-picked, four history shards, the dev server's two dynamic-config
  values (multi-operation, eager activities) plus the stack's own, written to a dynamic-config
  file. The ``default`` namespace is registered (a production server starts with none) and,
  unless told not to, ``cloudloop temporal setup`` registers the ``Cloudloop*`` search attributes,
  as the Helm chart's hook Job does; the stack is ready once a visibility query naming them is
  accepted (the frontend's namespace cache has caught up).
- **Restart** (fault tests): the server is SIGKILLed and started again on the same databases;
  PostgreSQL keeps running.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from devstack.process import (
    ManagedProcess,
    console_script,
    free_port,
    tcp_open,
    temporal_ready,
)

PLUGIN = "postgres12"
DATABASES = {
    "temporal": "postgresql/v12/temporal",
    "temporal_visibility": "postgresql/v12/visibility",
}
DB_USER = "temporal"
#: The unprivileged user PostgreSQL runs as when the stack runs as root.
POSTGRES_OS_USER = "postgres"
#: The dev server's values the product relies on (see ``LocalStack._start_temporal``).
DYNAMIC_CONFIG = {
    "frontend.enableExecuteMultiOperation": True,
    "system.enableActivityEagerExecution": True,
}


def postgres_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<major>/bin`` (Debian's), or ``$CLOUDLOOP_PG_BIN``."""
    explicit = os.environ.get("CLOUDLOOP_PG_BIN")
    if explicit:
        return Path(explicit)
    majors = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "postgres").exists()),
        key=lambda p: (
            int(p.parent.name) if p.parent.name.isascii() and p.parent.name.isdigit() else 0
        ),
    )
    if not majors:
        raise RuntimeError(
            "PostgreSQL is needed for the production-shaped Temporal; "
            "install Debian's postgresql package (apt-get install postgresql)"
        )
    return majors[-1]


def _as_postgres_user(argv: list[str]) -> list[str]:
    """``argv`` as the ``postgres`` user when running as root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("running as root, PostgreSQL needs setpriv (util-linux) to drop root")
    return [
        setpriv,
        "--reuid",
        POSTGRES_OS_USER,
        "--regid",
        POSTGRES_OS_USER,
        "--clear-groups",
        "--pdeathsig",
        "SIGKILL",
        "--",
        *argv,
    ]


def _dynamic_value(text: str) -> object:
    """A ``--dynamic-config-value`` right-hand side: JSON when it parses, else a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass
class PostgresTemporal:
    """PostgreSQL and the Temporal server on it (see the module docstring)."""

    state_dir: Path
    logs: Path
    port: int
    dynamic_config: tuple[str, ...] = ()
    search_attributes: bool = True
    postgres_process: ManagedProcess | None = None
    server_process: ManagedProcess | None = None
    pg_port: int = 0
    pg_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, binaries: dict[str, Path], ready_timeout_s: float = 120.0) -> None:
        """Start PostgreSQL, set the schema up, start the server and wait until it serves."""
        started = time.monotonic()
        self._start_postgres()
        self._setup_schema(binaries["temporal-sql-tool"])
        self.timings["postgres_and_schema_s"] = time.monotonic() - started
        self.server_process = self._server_process(binaries["temporal-server"])
        self.server_process.start()
        self.server_process.wait_ready(ready_timeout_s)
        self._register_namespace(ready_timeout_s)
        if self.search_attributes:
            self._setup_search_attributes(ready_timeout_s)
        self.timings["ready_s"] = time.monotonic() - started

    def processes(self) -> list[ManagedProcess]:
        """Stop order: the server before its database."""
        return [p for p in (self.server_process, self.postgres_process) if p is not None]

    def cleanup(self) -> None:
        """Remove the root-run cluster's own folder (after :meth:`processes` are stopped)."""
        if self.pg_dir is not None and not self.pg_dir.is_relative_to(self.state_dir):
            shutil.rmtree(self.pg_dir, ignore_errors=True)

    # -- PostgreSQL ------------------------------------------------------------------------

    def _start_postgres(self) -> None:
        bin_dir = postgres_bin_dir()
        if os.geteuid() == 0:
            self.pg_dir = Path(tempfile.mkdtemp(prefix="cloudloop-postgres-"))
            user = pwd.getpwnam(POSTGRES_OS_USER)
            os.chown(self.pg_dir, user.pw_uid, user.pw_gid)
        else:
            self.pg_dir = self.state_dir / "postgres"
            self.pg_dir.mkdir(parents=True, exist_ok=True)
        data, socket_dir = self.pg_dir / "data", self.pg_dir
        subprocess.run(
            _as_postgres_user(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    DB_USER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=180,
        )
        self.pg_port = free_port()
        argv = [
            str(bin_dir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(self.pg_port),
            "-k",
            str(socket_dir),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "synchronous_commit=off",
            "-c",
            "max_connections=200",
        ]
        pg_port = self.pg_port
        self.postgres_process = ManagedProcess(
            "postgres", _as_postgres_user(argv), log_dir=self.logs, ready=lambda: tcp_open(pg_port)
        )
        self.postgres_process.start()
        self.postgres_process.wait_ready(120)

    def _sql_tool(self, tool: Path, database: str, *command: str) -> None:
        argv = [
            str(tool),
            "--plugin",
            PLUGIN,
            "--endpoint",
            "127.0.0.1",
            "--port",
            str(self.pg_port),
            "--user",
            DB_USER,
            "--database",
            database,
            *command,
        ]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"temporal-sql-tool {' '.join(command)} on {database} failed:\n"
                f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
            )

    def _setup_schema(self, tool: Path) -> None:
        for database, schema in DATABASES.items():
            self._sql_tool(tool, database, "create-database")
            self._sql_tool(tool, database, "setup-schema", "-v", "0.0")
            self._sql_tool(tool, database, "update-schema", "--schema-name", schema)

    # -- Temporal server -------------------------------------------------------------------

    def _config(self) -> dict[str, object]:
        def datastore(database: str, conns: int) -> dict[str, object]:
            return {
                "sql": {
                    "pluginName": PLUGIN,
                    "databaseName": database,
                    "connectAddr": f"127.0.0.1:{self.pg_port}",
                    "connectProtocol": "tcp",
                    "user": DB_USER,
                    "password": "",
                    "maxConns": conns,
                    "maxIdleConns": conns,
                    "maxConnLifetime": "1h",
                }
            }

        def service(grpc_port: int) -> dict[str, object]:
            return {
                "rpc": {
                    "grpcPort": grpc_port,
                    "membershipPort": free_port(),
                    "bindOnIP": "127.0.0.1",
                }
            }

        services = {
            "frontend": service(self.port),
            "history": service(free_port()),
            "matching": service(free_port()),
            "worker": service(free_port()),
        }
        return {
            "log": {"stdout": True, "level": "warn"},
            "persistence": {
                "defaultStore": "postgres-default",
                "visibilityStore": "postgres-visibility",
                "numHistoryShards": 4,
                "datastores": {
                    "postgres-default": datastore("temporal", 20),
                    "postgres-visibility": datastore("temporal_visibility", 4),
                },
            },
            "global": {"membership": {"maxJoinDuration": "30s", "broadcastAddress": "127.0.0.1"}},
            "services": services,
            "clusterMetadata": {
                "enableGlobalNamespace": False,
                "failoverVersionIncrement": 10,
                "masterClusterName": "active",
                "currentClusterName": "active",
                "clusterInformation": {
                    "active": {
                        "enabled": True,
                        "initialFailoverVersion": 1,
                        "rpcName": "frontend",
                        "rpcAddress": self.address,
                    }
                },
            },
            "dcRedirectionPolicy": {"policy": "noop"},
            "dynamicConfigClient": {
                "filepath": str(self.state_dir / "dynamicconfig.yaml"),
                "pollInterval": "10s",
            },
        }

    def _server_process(self, server: Path) -> ManagedProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        values: dict[str, object] = dict(DYNAMIC_CONFIG)
        for item in self.dynamic_config:
            key, _, value = item.partition("=")
            values[key] = _dynamic_value(value)
        # YAML is a superset of JSON: both files are written as JSON.
        (self.state_dir / "dynamicconfig.yaml").write_text(
            json.dumps({key: [{"value": value}] for key, value in values.items()}, indent=2)
        )
        config = self.state_dir / "config.yaml"
        config.write_text(json.dumps(self._config(), indent=2))
        port = self.port
        return ManagedProcess(
            "temporal-server",
            [str(server), "--config-file", str(config), "--allow-no-auth", "start"],
            log_dir=self.logs,
            ready=lambda: temporal_ready(port),
        )

    def _cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [console_script("temporal"), *args, "--address", self.address],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def _until(
        self,
        what: str,
        attempt: Callable[[], subprocess.CompletedProcess[str]],
        timeout: float,
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            result = attempt()
            if result.returncode == 0:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"temporal-server: {what}: {result.stderr[-2000:]}")
            time.sleep(1)

    def _register_namespace(self, timeout: float) -> None:
        def create() -> subprocess.CompletedProcess[str]:
            result = self._cli(
                "operator", "namespace", "create", "--namespace", "default", "--retention", "72h"
            )
            if "already" in (result.stderr + result.stdout).lower():
                return subprocess.CompletedProcess(result.args, 0, result.stdout, "")
            return result

        self._until("registering the default namespace", create, timeout)
        self._until(
            "the default namespace",
            lambda: self._cli("workflow", "list", "--namespace", "default", "--limit", "1"),
            timeout,
        )

    def _setup_search_attributes(self, timeout: float) -> None:
        cloudloop = Path(sys.executable).parent / "cloudloop"
        result = subprocess.run(
            [str(cloudloop), "temporal", "setup", "--wait", f"{timeout:.0f}s"],
            env={**os.environ, "CLOUDLOOP_TEMPORAL__ADDRESS": self.address},
            capture_output=True,
            text=True,
            timeout=timeout + 60,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"cloudloop temporal setup failed: {result.stderr[-2000:]}")
        self._until(
            "the Cloudloop search attributes",
            lambda: self._cli(
                "workflow",
                "list",
                "--namespace",
                "default",
                "--limit",
                "1",
                "--query",
                "CloudloopCluster = 'probe'",
            ),
            timeout,
        )
