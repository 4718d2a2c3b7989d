"""zVirt on the oVirt Engine emulator: the emulator alone (quick delays unless told otherwise),
the driver's settings for it, and a machine spec that clones the seed template.

Rules: every user starts its own emulator (its state is not reset between modules); the delays
are the scenario's (a fault test slows the step it kills the worker in).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from cloudloop.cloud.zvirt.settings import ZvirtSettings
from devstack.backends import emulator_only
from devstack.ovirt_emulator import Delays, OvirtEmulatorEndpoint, OvirtEmulatorOptions

#: Every transition visible but short: clones, boots, shutdowns and removals in tenths of seconds.
QUICK = Delays(
    clone_s=0.3, boot_s=0.3, guest_ip_s=0.2, shutdown_s=0.2, disk_resize_s=0.1, remove_s=0.1
)

#: Driver timings for :data:`QUICK` delays: short requests, waits and shutdowns, fast polling.
QUICK_TIMINGS: dict[str, float] = {
    "timeout_s": 5,
    "wait_timeout_s": 20,
    "poll_interval_s": 0.05,
    "shutdown_timeout_s": 2,
}


@contextmanager
def ovirt_engine(
    state_dir: Path, *, password: str, delays: Delays = QUICK
) -> Iterator[OvirtEmulatorEndpoint]:
    """The oVirt Engine emulator alone, admin ``password``, with ``delays``."""
    options = OvirtEmulatorOptions(password=password, delays=delays)
    with emulator_only(state_dir, ovirt_emulator=options) as local:
        assert local.ovirt is not None
        yield local.ovirt


def zvirt_settings(endpoint: OvirtEmulatorEndpoint, **overrides: Any) -> ZvirtSettings:
    """The driver's settings for the emulator (its CA, cluster and admin password);
    ``overrides`` set any other field (timeouts, polling)."""
    values: dict[str, Any] = {
        "api_url": endpoint.api_url,
        "username": endpoint.username,
        "password": SecretStr(endpoint.password),
        "ca_bundle": endpoint.ca_file,
        "cluster_id": endpoint.cluster_id,
    }
    values.update(overrides)
    return ZvirtSettings(**values)


def machine_spec(endpoint: OvirtEmulatorEndpoint, **fields: Any) -> dict[str, Any]:
    """A ZvirtMachine spec cloning the seed template onto its vNIC profile (2 GiB, a 20 GiB root
    disk); ``fields`` add or replace spec fields."""
    return {
        "template": endpoint.template,
        "vnicProfileID": endpoint.vnic_profile_id,
        "memory": 2048,
        "rootDiskSizeGb": 20,
        **fields,
    }
