"""The whole local stack: Temporal dev server, one or more control planes, moto's server.

``StackOptions(temporal_server="postgres")`` runs the production-shaped Temporal instead of the
dev server (the server built from its Go module on PostgreSQL, :mod:`.temporal_server`).

``LocalStack`` starts everything on loopback (free ports unless told otherwise), waits until each
part answers, writes ``stack.json`` with the addresses into the state folder, and stops it all.
The test fixtures and ``cloudloop dev`` both use it. Every process on it encrypts its Temporal
payloads with the stack's own codec key (:attr:`LocalStack.codec`), as the chart's processes do.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cloudloop import searchattrs
from cloudloop.codec import process_env, write_key
from cloudloop.settings import CodecSettings
from devstack import gotools
from devstack.kube import KubeControlPlane, KubeOptions, required_tools
from devstack.openstack_emulator import OpenStackEmulatorEndpoint, OpenStackEmulatorOptions
from devstack.openstack_emulator import emulator_process as openstack_emulator_process
from devstack.ovirt_emulator import (
    OvirtEmulatorEndpoint,
    OvirtEmulatorOptions,
    emulator_process,
)
from devstack.process import (
    ManagedProcess,
    console_script,
    free_port,
    http_ok,
    port_is_free,
    stop_all,
    temporal_ready,
)
from devstack.temporal_server import PostgresTemporal
from devstack.vcsim import VcsimEndpoint, VcsimOptions, vcsim_process

#: The one key of a local stack's codec key ring.
CODEC_KEY_ID = "local-1"


@dataclass
class StackOptions:
    state_dir: Path
    temporal: bool = True
    #: Fixed ports for ``dev`` (7233 and UI 8233); ``None`` picks free ports and runs headless.
    temporal_port: int | None = None
    temporal_ui_port: int | None = None
    #: The UI's codec endpoint (``cloudloop dev`` serves one on loopback), so it shows payloads.
    temporal_ui_codec_endpoint: str = ""
    #: Register the ``Cloudloop*`` search attributes at start (a bare server without them tests
    #: ``cloudloop temporal setup``).
    temporal_search_attributes: bool = True
    #: ``dev``: the ``temporal`` CLI's dev server (SQLite); ``postgres``: the server built from
    #: its Go module on PostgreSQL with SQL visibility, as users deploy it
    #: (:mod:`.temporal_server`).
    temporal_server: Literal["dev", "postgres"] = "dev"
    kube: tuple[KubeOptions, ...] = (KubeOptions(),)
    moto: bool = True
    #: Kept for callers of the old option: the AWS front (:mod:`.aws_front`, which answers the
    #: Auto Scaling lifecycle actions) now always runs in front of moto.
    autoscaling_ext: bool = False
    #: The AWS front's request rate per service (``None``: unlimited) and burst.
    aws_rate_per_s: float | None = None
    aws_burst: float = 50.0
    #: Extra ``--dynamic-config-value KEY=VALUE`` of the Temporal dev server.
    temporal_dynamic_config: tuple[str, ...] = ()
    #: The oVirt/zVirt Engine emulator (:mod:`.ovirt_emulator`); ``None`` leaves it out.
    ovirt_emulator: OvirtEmulatorOptions | None = None
    #: vcsim, govmomi's vCenter simulator (:mod:`.vcsim`); ``None`` leaves it out.
    vcsim: VcsimOptions | None = None
    #: The OpenStack API emulator (:mod:`.openstack_emulator`); ``None`` leaves it out.
    openstack_emulator: OpenStackEmulatorOptions | None = None


@dataclass
class LocalStack:
    options: StackOptions
    temporal_process: ManagedProcess | None = None
    #: PostgreSQL and the server on it, with ``temporal_server="postgres"``.
    postgres_temporal: PostgresTemporal | None = None
    moto_process: ManagedProcess | None = None
    clusters: dict[str, KubeControlPlane] = field(default_factory=dict)
    temporal_address: str = ""
    temporal_ui_url: str = ""
    moto_endpoint: str = ""
    autoscaling_ext_process: ManagedProcess | None = None
    #: The AWS front (limits, throttling, lifecycle actions) before moto: what the product uses.
    aws_endpoint: str = ""
    #: The same front (kept for the termination tests' name).
    autoscaling_endpoint: str = ""
    ovirt_process: ManagedProcess | None = None
    #: Where the oVirt emulator answers (``api_url``, ``admin_url``, ``ca_file``), when started.
    ovirt: OvirtEmulatorEndpoint | None = None
    vcsim_process: ManagedProcess | None = None
    #: Where vcsim answers (``url``, credentials, ``ca_file``), when started.
    vcsim: VcsimEndpoint | None = None
    openstack_process: ManagedProcess | None = None
    #: Where the OpenStack emulator answers (``auth_url``, ``admin_url``), when started.
    openstack: OpenStackEmulatorEndpoint | None = None
    started_in_s: float = 0.0

    @property
    def state_dir(self) -> Path:
        return self.options.state_dir

    @property
    def codec(self) -> CodecSettings:
        """The payload codec of every process on this stack: one key, made at the first use
        and kept with the state (a restarted ``cloudloop dev`` still decodes its histories)."""
        keys = self.state_dir / "codec-keys"
        if not (keys / CODEC_KEY_ID).exists():
            with contextlib.suppress(FileExistsError):
                write_key(keys, CODEC_KEY_ID)
        return CodecSettings(key_dir=keys)

    def codec_env(self) -> dict[str, str]:
        """:attr:`codec` as a process's environment."""
        return process_env(self.codec)

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig of the first (main) control plane."""
        return next(iter(self.clusters.values())).kubeconfig

    def start(self) -> LocalStack:
        started = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tools = required_tools(self.options.kube)
        if self.options.vcsim is not None:
            tools = [*tools, "vcsim"]
        if self.options.temporal and self.options.temporal_server == "postgres":
            tools = [*tools, "temporal-server", "temporal-sql-tool"]
        binaries = gotools.ensure_built(tools)
        logs = self.state_dir / "logs"
        try:
            if self.options.temporal and self.options.temporal_server == "postgres":
                self._start_postgres_temporal(logs, binaries)
            elif self.options.temporal:
                self._start_temporal(logs)
            if self.options.moto:
                port = free_port()
                self.moto_endpoint = f"http://127.0.0.1:{port}"
                self.moto_process = ManagedProcess(
                    "moto",
                    # moto_server with the ELB behaviour moto lacks (devstack/moto_ext.py)
                    [sys.executable, "-m", "devstack.moto_ext", "-H", "127.0.0.1", "-p", str(port)],
                    log_dir=logs,
                    ready=lambda: http_ok(f"{self.moto_endpoint}/moto-api/data.json"),
                )
                self.moto_process.start()
                self._start_aws_front(logs)
            if self.options.ovirt_emulator is not None:
                self._start_ovirt_emulator(self.options.ovirt_emulator, logs)
            if self.options.vcsim is not None:
                self.vcsim_process, self.vcsim = vcsim_process(
                    binaries["vcsim"], self.options.vcsim, self.state_dir / "vcsim", logs
                )
                self.vcsim_process.start()
            if self.options.openstack_emulator is not None:
                self.openstack_process, self.openstack = openstack_emulator_process(
                    self.options.openstack_emulator, self.state_dir / "openstack", logs
                )
                self.openstack_process.start()
            for kube_options in self.options.kube:
                plane = KubeControlPlane(kube_options, self.state_dir / "kube")
                self.clusters[kube_options.name] = plane
                plane.start(binaries)
            for process in (
                self.temporal_process,
                self.moto_process,
                self.autoscaling_ext_process,
                self.ovirt_process,
                self.openstack_process,
            ):
                if process is not None:
                    process.wait_ready(60)
            if self.vcsim_process is not None and self.options.vcsim is not None:
                self.vcsim_process.wait_ready(self.options.vcsim.ready_timeout_s)
            for plane in self.clusters.values():
                plane.wait_ready()
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started
        self._write_state()
        return self

    def stop(self) -> None:
        processes = [p for plane in self.clusters.values() for p in reversed(plane.processes)]
        processes += [p for p in (self.moto_process, self.temporal_process) if p is not None]
        processes += [
            p
            for p in (self.ovirt_process, self.vcsim_process, self.openstack_process)
            if p is not None
        ]
        if self.autoscaling_ext_process is not None:
            processes.insert(0, self.autoscaling_ext_process)
        stop_all(processes)
        if self.postgres_temporal is not None:  # the server is stopped: now its database
            stop_all(self.postgres_temporal.processes())
            self.postgres_temporal.cleanup()
        for plane in self.clusters.values():
            plane.processes.clear()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_temporal(self, logs: Path) -> None:
        port = self.options.temporal_port or free_port()
        if not port_is_free(port):
            raise RuntimeError(f"port {port} is taken; is another `cloudloop dev` running?")
        argv = [
            console_script("temporal"),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--db-filename",
            str(self.state_dir / "temporal.db"),
            # Write-ahead log, synced at checkpoints: a commit is one append instead of a
            # rollback journal created, synced and deleted. A crashed server loses nothing; a
            # power cut may lose the last commits (a dev store).
            *("--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"),
            "--log-level",
            "warn",
            "--dynamic-config-value",
            "frontend.enableExecuteMultiOperation=true",
            # An activity scheduled by a workflow task comes back in the task's answer.
            "--dynamic-config-value",
            "system.enableActivityEagerExecution=true",
        ]
        for value in self.options.temporal_dynamic_config:
            argv += ["--dynamic-config-value", value]
        if self.options.temporal_search_attributes:
            for name in searchattrs.KEYWORDS:
                argv += ["--search-attribute", f"{name}=Keyword"]
        if self.options.temporal_ui_port:
            argv += ["--ui-port", str(self.options.temporal_ui_port)]
            if self.options.temporal_ui_codec_endpoint:
                argv += ["--ui-codec-endpoint", self.options.temporal_ui_codec_endpoint]
            self.temporal_ui_url = f"http://127.0.0.1:{self.options.temporal_ui_port}"
        else:
            argv.append("--headless")
        self.temporal_address = f"127.0.0.1:{port}"
        self.temporal_process = ManagedProcess(
            "temporal", argv, log_dir=logs, ready=lambda: temporal_ready(port)
        )
        self.temporal_process.start()

    def _start_postgres_temporal(self, logs: Path, binaries: dict[str, Path]) -> None:
        port = self.options.temporal_port or free_port()
        if not port_is_free(port):
            raise RuntimeError(f"port {port} is taken; is another `cloudloop dev` running?")
        self.postgres_temporal = PostgresTemporal(
            state_dir=self.state_dir / "temporal-server",
            logs=logs,
            port=port,
            dynamic_config=self.options.temporal_dynamic_config,
            search_attributes=self.options.temporal_search_attributes,
        )
        self.temporal_address = self.postgres_temporal.address
        self.postgres_temporal.start(binaries)
        # restart_temporal and the readiness wait treat the server like the dev server.
        self.temporal_process = self.postgres_temporal.server_process

    def _start_aws_front(self, logs: Path) -> None:
        port = free_port()
        self.aws_endpoint = self.autoscaling_endpoint = f"http://127.0.0.1:{port}"
        argv = [
            sys.executable,
            "-m",
            "devstack.aws_front",
            "--port",
            str(port),
            "--upstream",
            self.moto_endpoint,
            "--burst",
            str(self.options.aws_burst),
        ]
        if self.options.aws_rate_per_s is not None:
            argv += ["--rate", str(self.options.aws_rate_per_s)]
        self.autoscaling_ext_process = ManagedProcess(
            "aws-front",
            argv,
            log_dir=logs,
            ready=lambda: http_ok(f"{self.aws_endpoint}/_cloudloop/healthz"),
        )
        self.autoscaling_ext_process.start()

    def restart_temporal(self, *, down_s: float = 0.0, timeout: float = 60.0) -> None:
        """SIGKILL the Temporal dev server (or the production-shaped server) and start it again
        on the same database after ``down_s`` seconds."""
        assert self.temporal_process is not None
        self.temporal_process.kill()
        time.sleep(down_s)
        self.temporal_process.start()
        self.temporal_process.wait_ready(timeout)

    def _start_ovirt_emulator(self, options: OvirtEmulatorOptions, logs: Path) -> None:
        self.ovirt_process, self.ovirt = emulator_process(options, self.state_dir / "ovirt", logs)
        self.ovirt_process.start()

    def _write_state(self) -> None:
        state = {
            "temporal_address": self.temporal_address,
            "temporal_ui_url": self.temporal_ui_url,
            "moto_endpoint": self.moto_endpoint,
            "aws_endpoint": self.aws_endpoint,
            "autoscaling_endpoint": self.autoscaling_endpoint,
            "ovirt_api_url": self.ovirt.api_url if self.ovirt else "",
            "vcsim_url": self.vcsim.url if self.vcsim else "",
            "openstack_auth_url": self.openstack.auth_url if self.openstack else "",
            "codec_key_dir": str(self.codec.key_dir),
            "kubeconfigs": {name: str(p.kubeconfig) for name, p in self.clusters.items()},
            "started_in_s": round(self.started_in_s, 2),
        }
        (self.state_dir / "stack.json").write_text(json.dumps(state, indent=2))
