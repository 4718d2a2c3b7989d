"""vSphere layout ``Standard`` as definitions (Deckhouse ``candi/layouts/standard``).

:func:`define` turns a validated ``VsphereClusterConfiguration`` into ``base-infrastructure``
(Datacenter and compute clusters by tag, the VM folder, the nested resource pools), one
``master-node`` per replica (data disk and VM) and one ``static-node`` per node group index,
with the reference's names, outputs and the ``VsphereCloudDiscoveryData`` template.
:mod:`cloudloop.cloud.vsphere.layout_resources` acts on them.
What is made, and the departures from the Terraform modules:
docs/decisions/0043-vsphere-layout-standard.md.

Rules:
- Identity is the inventory path: a VM ``/<datacenter>/vm/<vmFolderPath>/<name>``, a pool
  ``<cluster>/Resources[/<base>]/<prefix>``, the folder its path, the disk its datastore path.
- Tags and tag categories are pre-existing: looked up, never created.
- ``storagePolicyID`` and ``nsxt`` are refused.
- The master zone is ``sorted(masterNodeGroup.zones ∩ zones)[i mod n]``; a static node's the
  same over its group's zones.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import uuid
from typing import Any

from cloudloop.layouts.bootstrap import MASTERS
from cloudloop.layouts.config import ClusterIdentity, VsphereClusterConfiguration
from cloudloop.layouts.model import (
    LayoutDef,
    LayoutError,
    ModuleDef,
    ResourceDef,
    assemble,
    ref,
    resource_key,
)

LAYOUTS = ("Standard",)
DISCOVERY_API_VERSION = "deckhouse.io/v1"
DISCOVERY_KIND = "VsphereCloudDiscoveryData"
DATA_DEVICE = "/dev/sdb"
DATA_DISK_GB = 10
DATA_DISK_TYPE = "eagerZeroedThick"
DEFAULT_ROOT_GB = 50
#: Deckhouse's ``extra_config`` turning VMware Tools time synchronisation off.
TIMESYNC_OFF = {
    "time.synchronize.continue": "0",
    "time.synchronize.restore": "0",
    "time.synchronize.resume.disk": "0",
    "time.synchronize.shrink": "0",
    "time.synchronize.tools.startup": "0",
    "time.synchronize.tools.enable": "0",
    "time.synchronize.resume.host": "0",
}

#: Namespace of the VMs' instance UUIDs (``uuid5(ns, "<cluster uuid>/<vm name>")``).
INSTANCE_UUID_NS = uuid.UUID("6d1c1f5e-7a43-4b8e-9a55-0c5d7c3e2f10")

DATACENTER = "vsphere.datacenter"
FOLDER = "vsphere.folder"
CLUSTER = "vsphere.compute_cluster"
POOL = "vsphere.resource_pool"
DISK = "vsphere.virtual_disk"
VM = "vsphere.virtual_machine"


def instance_uuid(cluster_uuid: str, name: str) -> str:
    """The instance UUID a layout VM is cloned with (found by it after a crash)."""
    return str(uuid.uuid5(INSTANCE_UUID_NS, f"{cluster_uuid}/{name}"))


def _nic(index: int) -> str:
    """The guest's name of the ``index``-th NIC (``ens192``, ``ens224``, ``ens256``...)."""
    return f"ens{192 + 32 * index}"


class _Builder:
    def __init__(
        self, config: VsphereClusterConfiguration, cluster: ClusterIdentity, zones: list[str]
    ):
        self.c = config
        self.p = cluster.prefix
        self.uuid = cluster.uuid
        missing = sorted(set(config.zones) - set(zones))
        if missing:
            raise LayoutError(
                f"zones {missing}: no compute cluster in region {config.region!r} carries that "
                f"{config.zoneTagCategory!r} tag (found: {sorted(zones)})"
            )
        self.zones = sorted(set(config.zones))
        if config.storagePolicyID:
            raise LayoutError(
                "storagePolicyID: storage policies are not supported; name datastores"
            )
        if config.nsxt:
            raise LayoutError("nsxt: NSX-T load balancing is not supported by this engine")
        self.dc = resource_key(DATACENTER, config.region)
        base = (config.baseResourcePool or "").strip("/")
        self.base_pool = base
        if config.useNestedResourcePool:
            self.pool_path = f"{base}/{self.p}" if base else self.p
        else:
            self.pool_path = base

    # -- base-infrastructure ---------------------------------------------------------------
    def base(self) -> ModuleDef:
        c = self.c
        resources = [
            ResourceDef(
                kind=DATACENTER,
                name=c.region,
                properties={"region": c.region, "category": c.regionTagCategory},
                outputs=["id", "name"],
                read_only=True,
            )
        ]
        if not c.vmFolderExists:
            resources.append(
                ResourceDef(
                    kind=FOLDER,
                    name=c.vmFolderPath.strip("/"),
                    properties={"datacenter": ref(self.dc, "name"), "path": c.vmFolderPath},
                    outputs=["id", "path"],
                )
            )
        for zone in self.zones:
            resources.append(
                ResourceDef(
                    kind=CLUSTER,
                    name=zone,
                    properties={
                        "datacenter": ref(self.dc, "name"),
                        "zone": zone,
                        "category": c.zoneTagCategory,
                    },
                    outputs=["id", "name", "path"],
                    read_only=True,
                )
            )
        if c.useNestedResourcePool:
            for zone in self.zones:
                resources.append(
                    ResourceDef(
                        kind=POOL,
                        name=f"{zone}/{self.p}",
                        properties={
                            "cluster_path": ref(resource_key(CLUSTER, zone), "path"),
                            "parent": self.base_pool,
                            "pool_name": self.p,
                            "zone": zone,
                        },
                        outputs=["id", "path"],
                    )
                )
        return ModuleDef(id="base", module="base-infrastructure", resources=resources)

    # -- nodes -----------------------------------------------------------------------------
    def _zone(self, wanted: list[str] | None, index: int, what: str) -> str:
        zones = sorted(set(self.zones) & set(wanted)) if wanted else self.zones
        if not zones:
            raise LayoutError(f"{what}: none of its zones {wanted} is one of zones {self.zones}")
        return zones[index % len(zones)]

    def _metadata(self, name: str, network: dict[str, Any] | None) -> str:
        data: dict[str, Any] = {"local-hostname": name, "public-keys-data": self.c.sshPublicKey}
        if network is not None:
            data["network"] = network
        return base64.b64encode(json.dumps(data, sort_keys=True).encode()).decode()

    def _network(
        self, addresses: list[Any], index: int, extra_nics: int, *, always: bool
    ) -> dict[str, Any] | None:
        """netplan v2 for ``ens192`` (static from ``mainNetworkIPAddresses[index]``, else DHCP)
        and the additional NICs (``internalNetworkCIDR`` host ``index+10``)."""
        ethernets: dict[str, Any] = {}
        static = addresses[index] if index < len(addresses) else None
        if static is not None:
            main: dict[str, Any] = {"addresses": [static.address], "gateway4": static.gateway}
            if static.nameservers:
                main["nameservers"] = dict(static.nameservers)
            ethernets[_nic(0)] = main
        elif always:
            ethernets[_nic(0)] = {"dhcp4": True}
        if extra_nics and self.c.internalNetworkCIDR:
            net = ipaddress.ip_network(self.c.internalNetworkCIDR, strict=False)
            ip = f"{net.network_address + index + 10}/{net.prefixlen}"
            ethernets[_nic(1)] = {"addresses": [ip]}
            for extra in range(2, extra_nics + 1):
                ethernets[_nic(extra)] = {"dhcp4": True}
        if not ethernets:
            return None
        return {"version": 2, "ethernets": ethernets}

    def _vm(
        self,
        name: str,
        instance_class: Any,
        zone: str,
        network: dict[str, Any] | None,
        data_disk: Any = None,
    ) -> ResourceDef:
        ic, c = instance_class, self.c
        extra = {"disk.EnableUUID": "TRUE"}
        if c.disableTimesync:
            extra.update(TIMESYNC_OFF)
        extra["guestinfo.metadata"] = self._metadata(name, network)
        extra["guestinfo.metadata.encoding"] = "base64"
        pool = (ic.resourcePool or "").strip("/") or self.pool_path
        depends = []
        if not c.vmFolderExists:
            depends.append(resource_key(FOLDER, c.vmFolderPath.strip("/")))
        if c.useNestedResourcePool and not ic.resourcePool:
            depends.append(resource_key(POOL, f"{zone}/{self.p}"))
        properties: dict[str, Any] = {
            "datacenter": ref(self.dc, "name"),
            "folder": c.vmFolderPath.strip("/"),
            "cluster_path": ref(resource_key(CLUSTER, zone), "path"),
            "pool": pool,
            "template": ic.template,
            "datastore": ic.datastore,
            "networks": [ic.mainNetwork, *ic.additionalNetworks],
            "num_cpus": ic.numCPUs,
            "memory_mb": ic.memory,
            "root_disk_gb": ic.rootDiskSize or DEFAULT_ROOT_GB,
            "runtime_options": dict(ic.runtimeOptions),
            "extra_config": extra,
            "zone": zone,
            "instance_uuid": instance_uuid(self.uuid, name),
        }
        if data_disk is not None:
            properties["data_disk"] = data_disk
        return ResourceDef(
            kind=VM,
            name=name,
            properties=properties,
            depends_on=depends,
            outputs=["id", "uuid", "default_ip"],
        )

    def master(self, index: int) -> ModuleDef:
        group, c = self.c.masterNodeGroup, self.c
        zone = self._zone(group.zones, index, "masterNodeGroup")
        name = f"{self.p}-master-{index}"
        ic = group.instanceClass
        path = f"deckhouse/{self.uuid}-kubernetes-data-{index}.vmdk"
        disk = ResourceDef(
            kind=DISK,
            name=path,
            properties={
                "datacenter": ref(self.dc, "name"),
                "datastore": ic.datastore,
                "path": path,
                "size_gb": DATA_DISK_GB,
                "type": DATA_DISK_TYPE,
            },
        )
        extra_nics = len(ic.additionalNetworks)
        network = self._network(ic.mainNetworkIPAddresses, index, extra_nics, always=True)
        # the disk's datastore path, not a reference: a VM whose disk went missing is still
        # found (and its missing disk shown) by a plan
        vm = self._vm(name, ic, zone, network, data_disk=f"[{ic.datastore}] {path}")
        vm.depends_on.append(disk.key)
        internal: Any = ref(vm.key, "default_ip")
        if extra_nics and c.internalNetworkCIDR:
            net = ipaddress.ip_network(c.internalNetworkCIDR, strict=False)
            internal = str(net.network_address + index + 10)
        return ModuleDef(
            id=f"master-{index}",
            module="master-node",
            node_name=name,
            group=MASTERS,
            machine=vm.key,
            resources=[disk, vm],
            outputs={
                "master_ip_address_for_ssh": ref(vm.key, "default_ip"),
                "node_internal_ip_address": internal,
                "kubernetes_data_device_path": DATA_DEVICE,
            },
        )

    def static(self, group_index: int, index: int) -> ModuleDef:
        group = self.c.nodeGroups[group_index]
        zone = self._zone(group.zones, index, f"node group {group.name}")
        name = f"{self.p}-{group.name}-{index}"
        ic = group.instanceClass
        network = self._network(
            ic.mainNetworkIPAddresses, index, len(ic.additionalNetworks), always=False
        )
        vm = self._vm(name, ic, zone, network if ic.mainNetworkIPAddresses else None)
        return ModuleDef(
            id=f"static-{group.name}-{index}",
            module="static-node",
            node_name=name,
            group=group.name,
            machine=vm.key,
            resources=[vm],
            outputs={"node_internal_ip_address": ref(vm.key, "default_ip")},
        )

    def discovery(self) -> dict[str, Any]:
        return {
            "apiVersion": DISCOVERY_API_VERSION,
            "kind": DISCOVERY_KIND,
            "vmFolderPath": self.c.vmFolderPath,
            "resourcePoolPath": self.pool_path,
            "zones": list(self.zones),
        }


def define(
    config: VsphereClusterConfiguration, cluster: ClusterIdentity, zones: list[str]
) -> LayoutDef:
    """The layout's definitions (``zones``: the zone tags on the region's compute clusters);
    :class:`LayoutError` for what it cannot build."""
    return assemble(
        "vsphere",
        config,
        cluster.prefix,
        cluster.uuid,
        lambda: _Builder(config, cluster, zones),
        layouts=LAYOUTS,
    )
