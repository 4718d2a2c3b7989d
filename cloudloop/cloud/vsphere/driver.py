"""``VsphereDriver``: node sync, discovery, first-class-disk volumes and Cluster API machines.

One session (:class:`~cloudloop.cloud.vsphere.base.VsphereBase`: one SOAP session, one tagging
session, counted calls, translated errors) and one object per capability taking it; discovery
and volumes both take the datastores part (datastores, their zones, storage policies), and
discovery the volumes' cluster disks. No load balancers or routes (vSphere has neither;
upstream's CPI implements none).
"""

from __future__ import annotations

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.datastores import VsphereDatastores
from cloudloop.cloud.vsphere.discovery import VsphereDiscovery
from cloudloop.cloud.vsphere.instances import VsphereInstances
from cloudloop.cloud.vsphere.machines import VsphereMachines
from cloudloop.cloud.vsphere.mapping import PROVIDER
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.cloud.vsphere.volumes import VsphereVolumes


class VsphereDriver(CloudDriver):
    """Capabilities: machines, instances, discovery, volumes."""

    provider = PROVIDER
    machines: VsphereMachines
    instances: VsphereInstances
    discovery: VsphereDiscovery
    volumes: VsphereVolumes

    def __init__(self, settings: VsphereSettings) -> None:
        self.session = VsphereBase(settings)
        self.settings = settings
        self.machines = VsphereMachines(self.session)
        self.instances = VsphereInstances(self.session)
        self.datastores = VsphereDatastores(self.session)
        self.volumes = VsphereVolumes(self.session, self.datastores)
        self.discovery = VsphereDiscovery(self.session, self.datastores, self.volumes)
        self.assembled()

    def close(self) -> None:
        self.session.close()
