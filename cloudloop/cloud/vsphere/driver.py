"""``VsphereDriver``: node sync, discovery and first-class-disk volumes over one vCenter.

The mixins share :class:`~cloudloop.cloud.vsphere.base.VsphereBase` (one SOAP session, one
tagging session, counted calls, translated errors). No load balancers or routes (vSphere has
neither; upstream's CPI implements none) and no Cluster API machines yet.
"""

from __future__ import annotations

from cloudloop.cloud.vsphere.instances import VsphereInstances
from cloudloop.cloud.vsphere.volumes import VsphereVolumes


class VsphereDriver(VsphereInstances, VsphereVolumes):
    """Capabilities (derived): instances, discovery, volumes."""
