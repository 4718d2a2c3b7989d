"""``VsphereDriver``: node sync, discovery, first-class-disk volumes and Cluster API machines.

The mixins share :class:`~cloudloop.cloud.vsphere.base.VsphereBase` (one SOAP session, one
tagging session, counted calls, translated errors). No load balancers or routes (vSphere has
neither; upstream's CPI implements none).
"""

from __future__ import annotations

from cloudloop.cloud.vsphere.instances import VsphereInstances
from cloudloop.cloud.vsphere.machines import VsphereMachines
from cloudloop.cloud.vsphere.volumes import VsphereVolumes


class VsphereDriver(VsphereMachines, VsphereInstances, VsphereVolumes):
    """Capabilities (derived): machines, instances, discovery, volumes."""
