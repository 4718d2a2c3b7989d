"""The zVirt (oVirt Engine) driver, through the official SDK ``ovirtsdk4``.

Machines for Cluster API (capz's steps), instances for node sync (batched searches), the
storage-domain discovery data and disks for CSI. Every SDK request is counted in
``cloud_api_requests_total{provider="zvirt"}`` and every SDK failure becomes a
:mod:`cloudloop.cloud.errors` class. Tests run it against :mod:`devstack.ovirt_emulator`.

Composition: one session (:class:`~cloudloop.cloud.zvirt.base.ZvirtBase`: the connection pool,
the call wrapper, error translation) and one object per capability taking it; the parts do not
call each other. No load balancers, snapshots or routes.
"""

from __future__ import annotations

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.zvirt.base import ZvirtBase, translate
from cloudloop.cloud.zvirt.discovery import ZvirtDiscovery
from cloudloop.cloud.zvirt.instances import ZvirtInstances
from cloudloop.cloud.zvirt.machines import ZvirtMachines
from cloudloop.cloud.zvirt.mapping import NAME, ZvirtMachineSpec, parse_machine_spec
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.cloud.zvirt.volumes import ZvirtVolumes

__all__ = [
    "NAME",
    "ZvirtBase",
    "ZvirtDriver",
    "ZvirtMachineSpec",
    "parse_machine_spec",
    "translate",
]


class ZvirtDriver(CloudDriver):
    """zVirt / oVirt Engine through ``ovirtsdk4``: machines, instances, discovery, volumes."""

    provider = NAME
    machines: ZvirtMachines
    instances: ZvirtInstances
    discovery: ZvirtDiscovery
    volumes: ZvirtVolumes

    def __init__(self, settings: ZvirtSettings) -> None:
        self.session = ZvirtBase(settings)
        self.settings = settings
        self.machines = ZvirtMachines(self.session)
        self.instances = ZvirtInstances(self.session)
        self.discovery = ZvirtDiscovery(self.session)
        self.volumes = ZvirtVolumes(self.session)
        self.assembled()

    def close(self) -> None:
        """Log out and close every pooled connection."""
        self.session.close()
