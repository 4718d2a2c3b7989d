"""zVirt layout ``Standard`` as definitions (Deckhouse ``candi/layouts/standard``).

:func:`define` turns a validated ``ZvirtClusterConfiguration`` into upstream's modules:
``base-infrastructure`` makes nothing (its only output is the
``ZvirtCloudProviderDiscoveryData`` template), one ``master-node`` per replica and one
``static-node`` per node group index, each the Terraform module's resources in its order (VM,
NIC, the masters' data disk and attachment, the start with cloud-init).
:mod:`cloudloop.cloud.zvirt.layout_resources` acts on them.
What is made, and the departures from Terraform: docs/decisions/0054-zvirt-layout-standard.md.

Rules:
- The VM's description carries this cluster's marker (:func:`description`): a same-named VM
  without it is refused, never taken over; only ``adopt`` marks one.
- The start comes after the NIC, the disk and the resize; its outputs are the VM's first IPv4.
- Outputs: ``master_ip_address_for_ssh`` = ``node_internal_ip_address`` = that IPv4,
  ``kubernetes_data_device_path`` = ``/dev/sdb``.
- Bootstrap data is merged into the cloud-init document (its top-level keys win).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import yaml

from cloudloop.cloud.zvirt.mapping import DISCOVERY_API_VERSION, DISCOVERY_KIND
from cloudloop.layouts.bootstrap import MASTERS
from cloudloop.layouts.config import (
    ClusterIdentity,
    ZvirtClusterConfiguration,
    ZvirtNodeInstanceClass,
)
from cloudloop.layouts.model import (
    LayoutDef,
    LayoutError,
    ModuleDef,
    ResourceDef,
    assemble,
    ref,
)

LAYOUTS = ("Standard",)
DATA_DEVICE = "/dev/sdb"
NIC_NAME = "nic1"
SSH_KEY_TYPES = ["rsa", "ecdsa", "ed25519"]

VM = "zvirt.vm"
NIC = "zvirt.nic"
DISK = "zvirt.disk"
ATTACHMENT = "zvirt.disk_attachment"
START = "zvirt.vm_start"


MARKER = "cloudloop layout "


def description(prefix: str, uuid: str) -> str:
    """What a layout VM or disk says about its owner (a same-named other one is refused)."""
    return f"{MARKER}{prefix} cluster_uuid={uuid}"


def cloud_init(hostname: str, ssh_key: str) -> str:
    """Upstream's ``initialization_custom_script`` without dhctl's ``cloudConfig``."""
    document = {
        "hostname": hostname,
        "create_hostname_file": True,
        "ssh_deletekeys": True,
        "ssh_genkeytypes": SSH_KEY_TYPES,
        "ssh_authorized_keys": [ssh_key.strip()],
    }
    return "#cloud-config\n" + yaml.safe_dump(document, sort_keys=False)


class _Builder:
    def __init__(self, config: ZvirtClusterConfiguration, cluster: ClusterIdentity) -> None:
        self.c = config
        self.p = cluster.prefix
        self.uuid = cluster.uuid
        self.description = description(self.p, self.uuid)

    def _static_nic(self, instance_class: ZvirtNodeInstanceClass, index: int) -> dict[str, Any]:
        network = instance_class.customNetworkConfig
        if network is None or not network.networkInterfaceAddress:
            return {}
        if index >= len(network.networkInterfaceAddress):
            raise LayoutError(
                f"customNetworkConfig.networkInterfaceAddress has no address for node {index}"
            )
        interface = ipaddress.ip_interface(network.networkInterfaceAddress[index])
        return {
            "name": network.networkInterfaceName or "eth0",
            "address": str(interface.ip),
            "netmask": network.networkInterfaceNetmask or str(interface.netmask),
            "gateway": network.networkInterfaceGateway,
            "dns_servers": list(network.dnsServers),
        }

    def _node(
        self,
        module_id: str,
        module: str,
        name: str,
        instance_class: ZvirtNodeInstanceClass,
        index: int,
        *,
        data_disk: bool,
        group: str,
    ) -> ModuleDef:
        vm = ResourceDef(
            kind=VM,
            name=name,
            properties={
                "cluster_id": self.c.clusterID,
                "template": instance_class.template,
                # checked before the clone (fail fast), as the machines' create does
                "vnic_profile_id": instance_class.vnicProfileID,
                "cores": instance_class.numCPUs,
                "memory_mib": instance_class.memory,
                "root_disk_gb": instance_class.rootDiskSizeGb,
                "type": "high_performance",
                "description": self.description,
            },
            outputs=["id", "name"],
        )
        nic = ResourceDef(
            kind=NIC,
            name=f"{name}/{NIC_NAME}",
            properties={
                "vm_id": ref(vm.key),
                "name": NIC_NAME,
                "vnic_profile_id": instance_class.vnicProfileID,
            },
        )
        resources = [vm, nic]
        start_after = [nic.key]
        if data_disk:
            data = f"{name}-kubernetes-data"
            storage_domain = instance_class.storageDomainID
            assert storage_domain is not None  # required for masters by the schema
            disk = ResourceDef(
                kind=DISK,
                name=data,
                properties={
                    "size_gb": instance_class.etcdDiskSizeGb,
                    "storage_domain_id": storage_domain,
                    "format": "raw",
                    "sparse": False,
                    "description": self.description,
                },
            )
            attachment = ResourceDef(
                kind=ATTACHMENT,
                name=data,
                properties={
                    "vm_id": ref(vm.key),
                    "disk_id": ref(disk.key),
                    "interface": "virtio",
                    "active": True,
                },
            )
            resources += [disk, attachment]
            start_after.append(attachment.key)
        start_props: dict[str, Any] = {
            "vm_id": ref(vm.key),
            "host_name": name,
            "custom_script": cloud_init(name, self.c.sshPublicKey),
        }
        static = self._static_nic(instance_class, index)
        if static:
            start_props["nic_configuration"] = static
        start = ResourceDef(
            kind=START,
            name=name,
            depends_on=start_after,
            properties=start_props,
            outputs=["id", "ip"],
        )
        resources.append(start)
        outputs: dict[str, Any] = {"node_internal_ip_address": ref(start.key, "ip")}
        if data_disk:
            outputs = {
                "master_ip_address_for_ssh": ref(start.key, "ip"),
                **outputs,
                "kubernetes_data_device_path": DATA_DEVICE,
            }
        return ModuleDef(
            id=module_id,
            module=module,
            node_name=name,
            group=group,
            machine=start.key,
            resources=resources,
            outputs=outputs,
        )

    def base(self) -> ModuleDef:
        return ModuleDef(id="base", module="base-infrastructure")

    def master(self, index: int) -> ModuleDef:
        return self._node(
            f"master-{index}",
            "master-node",
            f"{self.p}-master-{index}",
            self.c.masterNodeGroup.instanceClass,
            index,
            data_disk=True,
            group=MASTERS,
        )

    def static(self, group_index: int, index: int) -> ModuleDef:
        group = self.c.nodeGroups[group_index]
        return self._node(
            f"static-{group.name}-{index}",
            "static-node",
            f"{self.p}-{group.name}-{index}",
            group.instanceClass,
            index,
            data_disk=False,
            group=group.name,
        )

    @staticmethod
    def discovery() -> dict[str, Any]:
        """Upstream base ``outputs.tf``: no storage domains yet (the discoverer fills them)."""
        return {
            "apiVersion": DISCOVERY_API_VERSION,
            "kind": DISCOVERY_KIND,
            "storageDomains": [],
        }


def define(
    config: ZvirtClusterConfiguration, cluster: ClusterIdentity, zones: list[str]
) -> LayoutDef:
    """The layout's definitions; :class:`LayoutError` for what it cannot build."""
    return assemble(
        "zvirt",
        config,
        cluster.prefix,
        cluster.uuid,
        lambda: _Builder(config, cluster),
        layouts=LAYOUTS,
    )
