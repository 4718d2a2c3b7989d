"""What the OpenStack tests share: an emulator-only local stack, SDK connections, waiting.

The emulator runs as a child process of :class:`~devstack.local.LocalStack` (nothing else of the
stack); tests reach it through ``openstacksdk`` like the driver does, and through the admin port
for inspection and faults.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import openstack
from pydantic import SecretStr

from cloudloop.cloud.openstack.settings import ConnectionSettings, OpenStackSettings, RouteSettings
from devstack.local import LocalStack, StackOptions
from devstack.openstack_emulator import Delays, OpenStackEmulatorEndpoint, OpenStackEmulatorOptions

T = TypeVar("T")
#: An ``openstack.connection.Connection``; the SDK's own hints are partial, so tests use Any.
Sdk = Any

#: Quick but visible transitions: every PENDING_* and attaching state can be observed.
FAST = Delays(
    server_build_s=0.2,
    server_power_s=0.1,
    server_delete_s=0.1,
    lb_create_s=0.3,
    lb_update_s=0.15,
    lb_delete_s=0.15,
    volume_create_s=0.1,
    volume_attach_s=0.3,
    volume_detach_s=0.2,
    volume_extend_s=0.1,
    volume_delete_s=0.1,
)
PASSWORD = "emulated-pass"
APP_CREDENTIAL_SECRET = "seeded-app-credential-secret"


def emulator_stack(state_dir: Path, **options: Any) -> Iterator[LocalStack]:
    """A LocalStack with only the OpenStack emulator (for a module-scoped fixture)."""
    values: dict[str, Any] = {
        "password": PASSWORD,
        "application_credential_secret": APP_CREDENTIAL_SECRET,
        "delays": FAST,
    }
    values.update(options)
    local = LocalStack(
        StackOptions(
            state_dir=state_dir,
            temporal=False,
            moto=False,
            kube=(),
            openstack_emulator=OpenStackEmulatorOptions(**values),
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def connect(endpoint: OpenStackEmulatorEndpoint, **overrides: Any) -> Sdk:
    """An SDK connection with password auth (``overrides`` replace any argument)."""
    kwargs: dict[str, Any] = {**endpoint.connect_kwargs(), "api_timeout": 10}
    kwargs.update(overrides)
    return openstack.connect(**kwargs)


def eventually(check: Callable[[], T | None], *, timeout: float = 10.0, every: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"not reached within {timeout}s (last: {last!r})")


def openstack_settings(
    endpoint: OpenStackEmulatorEndpoint, *, router: bool = True, **overrides: Any
) -> OpenStackSettings:
    """The driver's settings for the emulator: password login, the seed's router for routes,
    quick polling. ``overrides`` set top-level fields or (by name) ``connection`` fields."""
    connection_fields = set(ConnectionSettings.model_fields)
    connection: dict[str, Any] = {
        "auth_url": endpoint.auth_url,
        "username": endpoint.username,
        "password": SecretStr(endpoint.password),
        "tenant_name": endpoint.project,
        "domain_name": endpoint.user_domain,
        "region": endpoint.region,
    }
    connection.update({k: v for k, v in overrides.items() if k in connection_fields})
    values: dict[str, Any] = {
        "connection": ConnectionSettings(**connection),
        "route": RouteSettings(router_id=endpoint.seed.router_id if router else ""),
        "poll_interval_s": 0.05,
        "wait_timeout_s": 30,
        "request_timeout_s": 10,
    }
    values.update({k: v for k, v in overrides.items() if k not in connection_fields})
    return OpenStackSettings(**values)
