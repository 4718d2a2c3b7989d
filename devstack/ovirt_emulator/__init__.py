"""An oVirt / zVirt Engine API emulator, kept as the project's own component.

It follows the public oVirt REST API (SSO password grant, XML on ``/ovirt-engine/api``) closely
enough for the official SDK ``ovirtsdk4`` and simulates a hypervisor: template clones that are
``image_locked`` before ``down``, boot to ``up`` with guest-agent IPs, shutdown, removal. It runs
as a child process of :class:`~devstack.local.LocalStack`; tests inspect it and inject
faults through :class:`OvirtEmulatorAdmin`. Drivers only ever reach it through the SDK.
"""

from __future__ import annotations

from devstack.ovirt_emulator.admin import OvirtEmulatorAdmin
from devstack.ovirt_emulator.engine import (
    SEED_CLUSTER_ID,
    SEED_TEMPLATE,
    SEED_VNIC_PROFILE_ID,
    Delays,
)
from devstack.ovirt_emulator.launcher import (
    OvirtEmulatorEndpoint,
    OvirtEmulatorOptions,
    emulator_process,
)

__all__ = [
    "SEED_CLUSTER_ID",
    "SEED_TEMPLATE",
    "SEED_VNIC_PROFILE_ID",
    "Delays",
    "OvirtEmulatorAdmin",
    "OvirtEmulatorEndpoint",
    "OvirtEmulatorOptions",
    "emulator_process",
]
