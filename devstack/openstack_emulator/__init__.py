"""An OpenStack API emulator (Keystone, Nova, Neutron, Octavia, Cinder, Glance), its own component.

It follows the OpenStack API references closely enough for the official SDK ``openstacksdk``:
token auth with a service catalog, microversions, paging, each service on its own port, and the
states that take time in a real cloud (servers building, Octavia ``PENDING_*``, Cinder
attaching/detaching/extending) as timed transitions. It runs as a child process of
:class:`~devstack.local.LocalStack`; tests inspect it and inject faults through
:class:`OpenStackEmulatorAdmin`. Drivers only ever reach it through the SDK.
"""

from __future__ import annotations

from devstack.openstack_emulator.admin import OpenStackEmulatorAdmin
from devstack.openstack_emulator.cloud import Delays
from devstack.openstack_emulator.launcher import (
    OpenStackEmulatorEndpoint,
    OpenStackEmulatorOptions,
    emulator_process,
)
from devstack.openstack_emulator.state import (
    FLAVORS,
    PRIVATE_CIDR,
    PRIVATE_NETWORK,
    PRIVATE_SUBNET,
    PUBLIC_CIDR,
    PUBLIC_NETWORK,
    ROUTER,
    Seed,
)

__all__ = [
    "FLAVORS",
    "PRIVATE_CIDR",
    "PRIVATE_NETWORK",
    "PRIVATE_SUBNET",
    "PUBLIC_CIDR",
    "PUBLIC_NETWORK",
    "ROUTER",
    "Delays",
    "OpenStackEmulatorAdmin",
    "OpenStackEmulatorEndpoint",
    "OpenStackEmulatorOptions",
    "Seed",
    "emulator_process",
]
