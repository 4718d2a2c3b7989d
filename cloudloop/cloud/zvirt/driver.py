"""The zVirt (oVirt Engine) driver, through the official SDK ``ovirtsdk4``.

Machines for Cluster API (capz's steps), instances for node sync (batched searches), the
storage-domain discovery data and disks for CSI. Every SDK request is counted in
``cloud_api_requests_total{provider="zvirt"}`` and every SDK failure becomes a
:mod:`cloudloop.cloud.errors` class. Tests run it against :mod:`devstack.ovirt_emulator`.
"""

from __future__ import annotations

from cloudloop.cloud.zvirt.base import ZvirtBase, translate
from cloudloop.cloud.zvirt.discovery import ZvirtDiscovery
from cloudloop.cloud.zvirt.instances import ZvirtInstances
from cloudloop.cloud.zvirt.machines import ZvirtMachines
from cloudloop.cloud.zvirt.mapping import NAME, ZvirtMachineSpec, parse_machine_spec
from cloudloop.cloud.zvirt.volumes import ZvirtVolumes

__all__ = [
    "NAME",
    "ZvirtBase",
    "ZvirtDriver",
    "ZvirtMachineSpec",
    "parse_machine_spec",
    "translate",
]


class ZvirtDriver(ZvirtMachines, ZvirtInstances, ZvirtDiscovery, ZvirtVolumes):
    """zVirt / oVirt Engine through ``ovirtsdk4``; no load balancers or routes."""
