"""zVirt on the oVirt Engine emulator: the emulator alone (quick delays unless told otherwise),
the driver's settings for it, a machine spec that clones the seed template, and node VMs made
through the SDK as an operator makes them.

Rules: every user starts its own emulator (its state is not reset between modules); the delays
are the scenario's (a fault test slows the step it kills the worker in).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ovirtsdk4 as sdk
import ovirtsdk4.types as sdk_types
from pydantic import SecretStr

from cloudloop.cloud.zvirt.settings import ZvirtSettings
from devstack.backends import emulator_only
from devstack.ovirt_emulator import Delays, OvirtEmulatorEndpoint, OvirtEmulatorOptions

#: Every transition visible but short: clones, boots, shutdowns and removals in tenths of seconds.
QUICK = Delays(
    clone_s=0.3, boot_s=0.3, guest_ip_s=0.2, shutdown_s=0.2, disk_resize_s=0.1, remove_s=0.1
)

#: Driver timings for :data:`QUICK` delays: short requests, waits and shutdowns, fast polling.
#: How long one seeded VM may take to come up (clone, boot, guest IP).
SEED_TIMEOUT_S = 60.0

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


def seed_node_vms(endpoint: OvirtEmulatorEndpoint, names: Sequence[str]) -> dict[str, str]:
    """VMs ``names`` through ovirtsdk4, as an operator makes them: cloned from the seed
    template, a NIC on the seed vNIC profile, started; returns (name → VM ID) when every VM is
    up and reports an IP."""
    connection = sdk.Connection(
        url=endpoint.api_url,
        username=endpoint.username,
        password=endpoint.password,
        ca_file=str(endpoint.ca_file) if endpoint.ca_file else None,
        timeout=10,
    )
    try:
        vms = connection.system_service().vms_service()
        made = [
            vms.add(
                sdk_types.Vm(
                    name=name,
                    cluster=sdk_types.Cluster(id=endpoint.cluster_id),
                    template=sdk_types.Template(name=endpoint.template),
                    memory=2 * 1024**3,
                ),
                clone=True,
            )
            for name in names
        ]
        for vm in made:
            service = vms.vm_service(vm.id)
            _wait(lambda s=service: s.get().status == sdk_types.VmStatus.DOWN, vm.name, "cloned")
            service.nics_service().add(
                sdk_types.Nic(
                    name="nic1",
                    vnic_profile=sdk_types.VnicProfile(id=endpoint.vnic_profile_id),
                    interface=sdk_types.NicInterface.VIRTIO,
                )
            )
            service.start()
        for vm in made:
            service = vms.vm_service(vm.id)
            _wait(lambda s=service: s.get().status == sdk_types.VmStatus.UP, vm.name, "up")
            _wait(
                lambda s=service: any(d.ips for d in s.reported_devices_service().list()),
                vm.name,
                "reporting an IP",
            )
        return {str(vm.name): str(vm.id) for vm in made}
    finally:
        connection.close()


def _wait(check: Any, name: str, what: str) -> None:
    deadline = time.monotonic() + SEED_TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"zvirt demo: VM {name} was not {what} in {SEED_TIMEOUT_S:.0f}s")
        time.sleep(0.2)
