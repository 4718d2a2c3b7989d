"""Provider-neutral data of the cloud contract: instances, zones, load balancers, volumes, routes.

These are pydantic models so they cross the Temporal boundary unchanged (pydantic converter).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class InstanceState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATED = "terminated"
    UNKNOWN = "unknown"


class NodeAddress(BaseModel):
    type: str  # InternalIP | ExternalIP | InternalDNS | ExternalDNS | Hostname
    address: str


class Instance(BaseModel):
    id: str
    provider_id: str
    name: str = ""
    state: InstanceState = InstanceState.UNKNOWN
    instance_type: str = ""
    zone: str = ""
    region: str = ""
    private_dns_name: str = ""
    addresses: list[NodeAddress] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)

    @property
    def gone(self) -> bool:
        """Terminated counts as gone (upstream ``InstanceExists`` is false); stopped does not."""
        return self.state is InstanceState.TERMINATED

    @property
    def shut_down(self) -> bool:
        """Upstream AWS: shut down means ``stopped`` (a stopping instance is not yet)."""
        return self.state is InstanceState.STOPPED


class InstanceListing(BaseModel):
    """A batched lookup's answer. IDs absent from ``found`` were positively reported missing."""

    found: dict[str, Instance] = Field(default_factory=dict)
    requests: int = 0


class Zone(BaseModel):
    name: str
    region: str
    state: str = "available"


class InstanceType(BaseModel):
    name: str
    cpu: int
    memory_mib: int
    root_disk_gib: int = 0


class DiscoveryData(BaseModel):
    region: str
    zones: list[Zone] = Field(default_factory=list)
    instance_types: list[InstanceType] = Field(default_factory=list)
    extra: dict[str, object] = Field(default_factory=dict)
    #: The Deckhouse document type this data fills (e.g. ``AWSCloudDiscoveryData``).
    api_version: str = "deckhouse.io/v1"
    kind: str = ""


class Disk(BaseModel):
    """A cloud disk that belongs to the cluster (tagged for it), for the orphaned-disk check."""

    id: str
    name: str = ""
    zone: str = ""
    size_gib: int = 0
    state: str = ""
    tags: dict[str, str] = Field(default_factory=dict)


class LoadBalancerPort(BaseModel):
    name: str = ""
    protocol: str = "TCP"
    port: int
    node_port: int


class LoadBalancerSpec(BaseModel):
    """Desired cloud load balancer for one Service."""

    name: str
    cluster: str
    service: str  # namespace/name
    service_uid: str
    ports: list[LoadBalancerPort]
    backend_instance_ids: list[str]
    annotations: dict[str, str] = Field(default_factory=dict)


class LoadBalancerStatus(BaseModel):
    name: str
    hostname: str = ""
    ip: str = ""


class VolumeSpec(BaseModel):
    name: str
    size_gib: int
    zone: str = ""
    volume_type: str = ""
    tags: dict[str, str] = Field(default_factory=dict)


class Volume(BaseModel):
    id: str
    size_gib: int
    zone: str = ""
    state: str = ""
    attached_to: list[str] = Field(default_factory=list)


class Attachment(BaseModel):
    volume_id: str
    instance_id: str
    device: str = ""


class Route(BaseModel):
    name: str
    destination_cidr: str
    target_instance_id: str = ""
    blackhole: bool = False


class MachineSpec(BaseModel):
    name: str
    cluster: str
    namespace: str
    provider_spec: dict[str, object] = Field(default_factory=dict)
    bootstrap_data_secret: str = ""


class Machine(BaseModel):
    id: str
    provider_id: str
    state: InstanceState = InstanceState.UNKNOWN
    addresses: list[NodeAddress] = Field(default_factory=list)
