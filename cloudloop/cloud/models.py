"""Provider-neutral data of the cloud contract: instances, zones, load balancers, volumes, routes.

These are pydantic models so they cross the Temporal boundary unchanged (pydantic converter).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

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
    #: Why the instance's metadata cannot be given yet (upstream ``InstanceMetadata`` failing,
    #: e.g. vSphere's zone lookup): its Node stays uninitialized and is retried; lifecycle
    #: decisions do not need the metadata and ignore it.
    init_error: str = ""

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
    #: Keys the cloud could not decide about (e.g. a by-name lookup that cannot prove absence,
    #: a VM whose guest reports no address yet): callers act on none of them.
    undecided: list[str] = Field(default_factory=list)
    #: What the cloud did answer about an undecided key ("no server is named x", "2 VMs match
    #: x"), so a Warning says what was found instead of blaming the network.
    why: dict[str, str] = Field(default_factory=dict)

    def undecide(self, key: str, why: str) -> None:
        """``key`` stays undecided, for the reason ``why``."""
        self.undecided.append(key)
        self.why[key] = why


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
    #: Whether the document lists ``zones`` (zVirt's schema has no such key).
    publish_zones: bool = True
    #: ``False``: the discoverer's own kind, not the Terraform document with fields added.
    merge_base: bool = True
    #: Keys taken from the Terraform document when it has them: key -> dotted path in it.
    from_base: dict[str, str] = Field(default_factory=dict)
    #: Kinds an earlier cloudloop wrote for this document -> the keys the document of ``kind``
    #: does not have: such a base takes ``kind`` and loses those keys (Deckhouse has no schema
    #: for the old kind and would refuse the document).
    legacy_kinds: dict[str, list[str]] = Field(default_factory=dict)


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


class LoadBalancerBackend(BaseModel):
    """One node behind a load balancer: its instance and its labels."""

    node_name: str
    instance_id: str
    labels: dict[str, str] = Field(default_factory=dict)


class LoadBalancerSpec(BaseModel):
    """Desired cloud load balancer for one Service."""

    name: str
    cluster: str
    service: str  # namespace/name
    service_uid: str
    ports: list[LoadBalancerPort]
    backend_instance_ids: list[str]
    annotations: dict[str, str] = Field(default_factory=dict)
    #: The nodes behind ``backend_instance_ids`` (same order), with labels for node selectors.
    backends: list[LoadBalancerBackend] = Field(default_factory=list)
    #: ``spec.loadBalancerSourceRanges`` (empty: from anywhere).
    source_ranges: list[str] = Field(default_factory=list)
    #: ``Cluster`` or ``Local``; with ``Local`` health checks go to ``health_check_node_port``.
    external_traffic_policy: str = "Cluster"
    health_check_node_port: int = 0
    #: ``spec.loadBalancerIP``: the address the Service asks for, where the cloud honours it.
    load_balancer_ip: str = ""


class LoadBalancerStatus(BaseModel):
    name: str
    hostname: str = ""
    ip: str = ""
    #: The ingress ``ipMode`` (``Proxy`` when the LB speaks the PROXY protocol, as OCCM sets
    #: it, so kube-proxy sends in-cluster traffic through the LB); empty: not written (VIP).
    ip_mode: str = ""
    #: Annotations the cloud's controller writes back onto the Service (OCCM's
    #: ``load-balancer-id``), so a user sees and can reuse what was made.
    annotations: dict[str, str] = Field(default_factory=dict)


class VolumeSpec(BaseModel):
    name: str
    size_gib: int
    zone: str = ""
    volume_type: str = ""
    tags: dict[str, str] = Field(default_factory=dict)
    #: The owning cluster: the volume is tagged for it, so a retried create finds (adopts) it.
    cluster: str = ""
    #: Idempotency token for the cloud's create call (AWS ``ClientToken``, at most 64 chars).
    client_token: str = ""
    #: The StorageClass parameters, as given; the driver reads its own (EBS ``type``, ``iops``,
    #: DVP ``dvpStorageClass``, zVirt ``storageDomain``) and refuses bad ones (InvalidRequest).
    parameters: dict[str, str] = Field(default_factory=dict)
    #: Fill the new volume from this snapshot (a CSI ``VolumeContentSource``).
    snapshot_id: str = ""


class Volume(BaseModel):
    id: str
    size_gib: int
    zone: str = ""
    state: str = ""
    attached_to: list[str] = Field(default_factory=list)
    #: The name the volume was created for (AWS: the ``CSIVolumeName`` tag).
    name: str = ""
    volume_type: str = ""
    attachments: list[Attachment] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    #: Provisioned IOPS and throughput (MiB/s), 0 where the cloud does not say (EBS has them).
    iops: int = 0
    throughput: int = 0


class Attachment(BaseModel):
    volume_id: str
    instance_id: str
    device: str = ""
    #: ``attaching`` | ``attached`` | ``detaching`` | ``detached`` (AWS attachment states).
    state: str = ""
    #: The disk's serial as the guest sees it (``/dev/disk/by-id/*<serial>``): what the node
    #: plugin finds the device by (EBS NVMe: the volume ID without dash; virtio: the disk's).
    serial: str = ""


class SnapshotSpec(BaseModel):
    name: str
    source_volume_id: str
    cluster: str = ""
    tags: dict[str, str] = Field(default_factory=dict)
    client_token: str = ""


class Snapshot(BaseModel):
    id: str
    source_volume_id: str
    size_gib: int = 0
    #: ``pending`` | ``completed`` | ``error``.
    state: str = ""
    #: When the cloud took it (seconds since the epoch).
    created_at: float = 0.0
    #: The name it was created for (AWS: the ``CSIVolumeSnapshotName`` tag).
    name: str = ""

    @property
    def ready(self) -> bool:
        return self.state == "completed"


class StorageClassSpec(BaseModel):
    """One StorageClass a cloud offers for its volumes (from its discovery data)."""

    name: str
    parameters: dict[str, str] = Field(default_factory=dict)
    #: The cloud's own default among its classes (a setting may choose another).
    default: bool = False
    #: The zones this class serves (e.g. a datastore's); empty: every discovered zone.
    zones: list[str] = Field(default_factory=list)


class VolumeModification(BaseModel):
    """A size or attribute change in progress or done (AWS ``DescribeVolumesModifications``)."""

    volume_id: str
    #: ``modifying`` | ``optimizing`` | ``completed`` | ``failed``.
    state: str
    target_size_gib: int = 0
    message: str = ""
    #: When it started (seconds since the epoch; 0: unknown): a cooldown counts from it.
    started_at: float = 0.0


class Route(BaseModel):
    name: str
    destination_cidr: str
    target_instance_id: str = ""
    blackhole: bool = False


class MachineSpec(BaseModel):
    """The VM one Cluster API InfraMachine asks for.

    ``provider_spec`` is the InfraMachine's ``spec`` as written (DVP: ``vmClassName``, ``cpu``,
    ``memory``, ``rootDiskSize``, ``bootDiskImageRef``...; zVirt: ``template``, ``vnicProfileID``,
    ``cpu``, ``memory``, ``rootDiskSizeGb``...); the driver validates it (``InvalidRequest``).
    Bootstrap data is not here: it is secret, so it never enters workflow history; the activity
    reads it from the bootstrap Secret and hands it to :meth:`CloudDriver.create_machine`.
    """

    name: str  # the VM name: the InfraMachine's name
    namespace: str  # the InfraMachine's namespace
    cluster: str  # the CAPI Cluster name
    machine_uid: str  # the InfraMachine's UID; tags the VM so a retried create adopts it
    provider_spec: dict[str, Any] = Field(default_factory=dict)
    failure_domain: str = ""
    control_plane: bool = False


class Machine(BaseModel):
    """A VM as the cloud reports it."""

    id: str  # the cloud's ID (DVP: VM name; zVirt: VM UUID)
    provider_id: str  # dvp://<vm-name>, zvirt://<uuid>
    state: InstanceState = InstanceState.UNKNOWN
    phase: str = ""  # the cloud's own word for it (DVP: Running, Degraded; zVirt: up, down)
    addresses: list[NodeAddress] = Field(default_factory=list)
    message: str = ""  # why it is not running, when the cloud says
    #: The cloud says the VM will not get running by itself (DVP ``Degraded``, a Failed disk).
    failed: bool = False

    @property
    def provisioned(self) -> bool:
        """Running with at least one IP address: what CAPI's ``provisioned`` waits for."""
        return self.state is InstanceState.RUNNING and any(
            a.type in ("InternalIP", "ExternalIP") for a in self.addresses
        )
