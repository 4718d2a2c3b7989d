"""OpenStack on the OpenStack API emulator: the emulator alone (quick but visible transitions),
SDK connections, the driver's settings for it, and the ``cloud.conf`` Deckhouse would mount.

Rules: every user starts its own emulator or resets the shared one (``OpenStackEmulatorAdmin``);
the settings builder sets the login and the seed's router, timings are the caller's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openstack
from pydantic import SecretStr

from cloudloop.cloud.openstack.settings import ConnectionSettings, OpenStackSettings, RouteSettings
from devstack.backends import emulator_only
from devstack.openstack_emulator import Delays, OpenStackEmulatorEndpoint, OpenStackEmulatorOptions

#: An ``openstack.connection.Connection``; the SDK's own hints are partial, so callers use Any.
Sdk = Any

#: Quick but visible transitions: every PENDING_* and attaching state can be observed.
QUICK = Delays(
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


@contextmanager
def openstack_emulator(state_dir: Path, **options: Any) -> Iterator[OpenStackEmulatorEndpoint]:
    """The emulator alone: :data:`PASSWORD`, the seeded application credential and
    :data:`QUICK` delays unless ``options`` (:class:`OpenStackEmulatorOptions` fields) say
    otherwise."""
    values: dict[str, Any] = {
        "password": PASSWORD,
        "application_credential_secret": APP_CREDENTIAL_SECRET,
        "delays": QUICK,
    }
    values.update(options)
    with emulator_only(state_dir, openstack_emulator=OpenStackEmulatorOptions(**values)) as local:
        assert local.openstack is not None
        yield local.openstack


def connect(endpoint: OpenStackEmulatorEndpoint, **overrides: Any) -> Sdk:
    """An SDK connection with password auth (``overrides`` replace any argument)."""
    kwargs: dict[str, Any] = {**endpoint.connect_kwargs(), "api_timeout": 10}
    kwargs.update(overrides)
    return openstack.connect(**kwargs)


def openstack_settings(
    endpoint: OpenStackEmulatorEndpoint, *, router: bool = True, **overrides: Any
) -> OpenStackSettings:
    """The driver's settings for the emulator: password login and, with ``router``, the seed's
    router for routes. ``overrides`` set top-level fields (timings, load balancer, zones) or,
    by name, ``connection`` fields."""
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
    }
    values.update({k: v for k, v in overrides.items() if k not in connection_fields})
    return OpenStackSettings(**values)


def cloud_conf(endpoint: OpenStackEmulatorEndpoint, *, serial: bool = False) -> str:
    """A ``cloud.conf`` for the emulator, the way Deckhouse renders one."""
    return "\n".join(
        [
            "[Global]",
            f'auth-url = "{endpoint.auth_url}"',
            f'username = "{endpoint.username}"',
            f'password = "{endpoint.password}"',
            f'tenant-name = "{endpoint.project}"',
            f'domain-name = "{endpoint.user_domain}"',
            f'region = "{endpoint.region}"',
            "[LoadBalancer]",
            'create-monitor = "true"',
            'monitor-delay = "2s"',
            'monitor-timeout = "1s"',
            f"provider-requires-serial-api-calls = {'true' if serial else 'false'}",
            "[Route]",
            f"router-id = {endpoint.seed.router_id}",
            "",
        ]
    )


#: The driver's timings for machine tests: quick polls, waits the emulator's steps fit in.
QUICK_TIMINGS: dict[str, float] = {
    "poll_interval_s": 0.05,
    "wait_timeout_s": 20,
    "request_timeout_s": 10,
}


def machine_spec(**fields: Any) -> dict[str, Any]:
    """An OpenStackMachine spec the emulator's seed can run (CAPO v1beta1 field names): flavor
    ``m1.small``, the cirros image, one port on ``private`` in the ``default`` security group,
    a config drive and a tag; ``fields`` add or replace spec fields."""
    return {
        "flavor": "m1.small",
        "image": {"filter": {"name": "cirros-0.6.2-x86_64-disk"}},
        "ports": [
            {
                "network": {"filter": {"name": "private"}},
                "securityGroups": [{"filter": {"name": "default"}}],
            }
        ],
        "securityGroups": [{"filter": {"name": "default"}}],
        "configDrive": True,
        "tags": ["use-cluster-api=1"],
        **fields,
    }
