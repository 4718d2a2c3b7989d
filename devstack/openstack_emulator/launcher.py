"""Start the emulator as a child process of the local stack and describe where it answers."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from devstack.openstack_emulator.cloud import SERVICES, Delays
from devstack.openstack_emulator.identity import IdentityOptions
from devstack.openstack_emulator.state import Seed
from devstack.process import ManagedProcess, free_port, http_ok

#: The emulator reads its secrets from here (never from argv, which ``ps`` shows).
PASSWORD_ENV = "OPENSTACK_EMULATOR_PASSWORD"
APP_CREDENTIAL_ENV = "OPENSTACK_EMULATOR_APP_CREDENTIAL_SECRET"


@dataclass(frozen=True)
class OpenStackEmulatorOptions:
    """How ``LocalStack`` runs the emulator: account, zones, simulated delays, limits."""

    username: str = "demo"
    password: str = field(default="openstack-password", repr=False)
    project: str = "demo"
    region: str = "RegionOne"
    #: Also seed an application credential with this secret (``app_credential_id`` below).
    application_credential_secret: str = field(default="", repr=False)
    zones: tuple[str, ...] = ("nova", "nova-b")
    delays: Delays = field(default_factory=Delays)
    max_routes: int = 30
    gigabytes_quota: int = 10000

    def identity(self) -> IdentityOptions:
        return IdentityOptions(
            username=self.username,
            password=self.password,
            project_name=self.project,
            region=self.region,
            application_credential_secret=self.application_credential_secret,
        )


@dataclass(frozen=True)
class OpenStackEmulatorEndpoint:
    """Where a running emulator answers, and what a client needs to log in."""

    auth_url: str  # http://127.0.0.1:<port>/v3
    admin_url: str  # http://127.0.0.1:<port> (tests only)
    service_ports: dict[str, int]
    username: str
    password: str = field(repr=False)
    project: str = "demo"
    region: str = "RegionOne"
    user_domain: str = "Default"
    project_domain: str = "Default"
    project_id: str = ""
    app_credential_id: str = ""
    app_credential_secret: str = field(default="", repr=False)
    zones: tuple[str, ...] = ()
    #: The second region (same services under a URL prefix) and the second domain's account
    #: (its user has :attr:`password` too; its seeded application credential the same secret).
    region_two: str = ""
    second_domain: str = ""
    second_domain_id: str = ""
    second_username: str = ""
    second_project: str = ""
    second_project_id: str = ""
    second_app_credential_id: str = ""

    @property
    def seed(self) -> Seed:
        return Seed(project_id=self.project_id)

    def connect_kwargs(self) -> dict[str, str]:
        """Arguments for ``openstack.connect`` (password auth)."""
        return {
            "auth_url": self.auth_url,
            "username": self.username,
            "password": self.password,
            "project_name": self.project,
            "user_domain_name": self.user_domain,
            "project_domain_name": self.project_domain,
            "region_name": self.region,
        }


def emulator_process(
    options: OpenStackEmulatorOptions, state_dir: Path, log_dir: Path
) -> tuple[ManagedProcess, OpenStackEmulatorEndpoint]:
    """A not yet started :class:`ManagedProcess` running the emulator, and its endpoint."""
    ports = {name: free_port() for name in SERVICES}
    admin_port = free_port()
    state_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "devstack.openstack_emulator",
        "--ports",
        json.dumps(ports),
        "--admin-port",
        str(admin_port),
        "--username",
        options.username,
        "--project",
        options.project,
        "--region",
        options.region,
        "--zones",
        ",".join(options.zones),
        "--max-routes",
        str(options.max_routes),
        "--gigabytes-quota",
        str(options.gigabytes_quota),
        "--endpoints-file",
        str(state_dir / "endpoints.json"),
    ]
    for item in dataclasses.fields(options.delays):
        argv += [f"--{item.name.replace('_', '-')}", str(getattr(options.delays, item.name))]
    identity = options.identity()
    endpoint = OpenStackEmulatorEndpoint(
        auth_url=f"http://127.0.0.1:{ports['identity']}/v3",
        admin_url=f"http://127.0.0.1:{admin_port}",
        service_ports=ports,
        username=options.username,
        password=options.password,
        project=options.project,
        region=options.region,
        project_id=identity.project_id,
        app_credential_id=(
            identity.application_credential_id if options.application_credential_secret else ""
        ),
        app_credential_secret=options.application_credential_secret,
        zones=options.zones,
        region_two=identity.region_two,
        second_domain=identity.second_domain,
        second_domain_id=identity.second_domain_id,
        second_username=identity.second_username,
        second_project=identity.second_project_name,
        second_project_id=identity.second_project_id,
        second_app_credential_id=(
            identity.second_application_credential_id
            if options.application_credential_secret
            else ""
        ),
    )
    env = {**os.environ, PASSWORD_ENV: options.password}
    if options.application_credential_secret:
        env[APP_CREDENTIAL_ENV] = options.application_credential_secret
    process = ManagedProcess(
        "openstack-emulator",
        argv,
        log_dir=log_dir,
        ready=lambda: http_ok(f"{endpoint.admin_url}/healthz"),
        env=env,
    )
    return process, endpoint
