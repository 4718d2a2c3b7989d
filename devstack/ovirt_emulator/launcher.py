"""Start the emulator as a child process of the local stack and describe where it listens."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from devstack import pki
from devstack.ovirt_emulator.engine import (
    SEED_CLUSTER_ID,
    SEED_TEMPLATE,
    SEED_VNIC_PROFILE_ID,
    Delays,
)
from devstack.process import ManagedProcess, free_port, http_ok

#: The emulator reads the engine password from here (never from argv, which ``ps`` shows).
PASSWORD_ENV = "OVIRT_EMULATOR_PASSWORD"


@dataclass(frozen=True)
class OvirtEmulatorOptions:
    """How ``LocalStack`` runs the emulator: credentials, HTTPS, simulated delays."""

    username: str = "admin@internal"
    password: str = field(default="engine-password", repr=False)
    #: HTTPS with a certificate from the stack's throw-away CA (``ca_file`` of the endpoint).
    tls: bool = True
    delays: Delays = field(default_factory=Delays)


@dataclass(frozen=True)
class OvirtEmulatorEndpoint:
    """Where a running emulator answers, and the seed a driver needs to use it."""

    api_url: str  # <scheme>://127.0.0.1:<port>/ovirt-engine/api
    admin_url: str  # http://127.0.0.1:<port> (tests only)
    ca_file: Path | None
    username: str
    password: str = field(repr=False)
    cluster_id: str = SEED_CLUSTER_ID
    template: str = SEED_TEMPLATE
    vnic_profile_id: str = SEED_VNIC_PROFILE_ID


def emulator_process(
    options: OvirtEmulatorOptions, state_dir: Path, log_dir: Path
) -> tuple[ManagedProcess, OvirtEmulatorEndpoint]:
    """A not yet started :class:`ManagedProcess` running the emulator, and its endpoint."""
    port, admin_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "devstack.ovirt_emulator",
        "--port",
        str(port),
        "--admin-port",
        str(admin_port),
        "--username",
        options.username,
    ]
    for item in dataclasses.fields(options.delays):
        argv += [f"--{item.name.replace('_', '-')}", str(getattr(options.delays, item.name))]
    ca_file: Path | None = None
    if options.tls:
        ca = pki.CertificateAuthority(state_dir / "pki", name="ovirt-ca")
        serving = ca.issue("ovirt-engine", common_name="ovirt-engine", server_hosts=("127.0.0.1",))
        argv += ["--tls-cert", str(serving.cert), "--tls-key", str(serving.key)]
        ca_file = ca.pair.cert
    scheme = "https" if options.tls else "http"
    endpoint = OvirtEmulatorEndpoint(
        api_url=f"{scheme}://127.0.0.1:{port}/ovirt-engine/api",
        admin_url=f"http://127.0.0.1:{admin_port}",
        ca_file=ca_file,
        username=options.username,
        password=options.password,
    )
    process = ManagedProcess(
        "ovirt-emulator",
        argv,
        log_dir=log_dir,
        ready=lambda: http_ok(f"{endpoint.admin_url}/healthz"),
        env={**os.environ, PASSWORD_ENV: options.password},
    )
    return process, endpoint
