"""DVP layout ``Standard`` as definitions (Deckhouse ``candi/layouts/standard``).

:func:`define` turns a validated ``DVPClusterConfiguration`` into upstream's modules, every
object in ``provider.namespace`` of the parent cluster: ``base-infrastructure`` (the
NetworkPolicy, the VM class and image lookups), one ``master-node`` per replica and one
``static-node`` per node group index (VirtualDisks, cloud-init Secret, VirtualMachine).
The objects, upstream's hashes and the departures: docs/decisions/0046-dvp-layout-standard.md.

Rules:
- Names and ``h6`` hashes are upstream's (:func:`tf_json`, disks' JSON encoded twice); they are
  written as upstream's ``last_applied_destructive_*_parameters[_hash]`` annotations.
- A name is computed only to create: every node object is found by its labels
  (``dvp.deckhouse.io/cluster-uuid`` + ``dvp.deckhouse.io/hostname``) and its role (its name
  without the trailing ``-<6 hex>`` is one of the resource's ``stems``), whatever its hash.
- The VM refers to its disks and Secret by the names found (its ``parts``).
- A change of the VM's destructive parameters (against its annotation, not its name) recreates
  the VM; the address is left out of that comparison.
- Static ``ipAddresses`` are refused; bootstrap data is merged into the cloud-init ``userData``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import DEFAULT_ZONES
from cloudloop.cloud.dvp.discovery import DISCOVERY_KIND
from cloudloop.layouts.config import (
    ClusterIdentity,
    DvpAdditionalDisk,
    DVPClusterConfiguration,
    DvpMasterInstanceClass,
    DvpNodeInstanceClass,
    DvpRootDisk,
    DvpVirtualMachine,
)
from cloudloop.layouts.model import (
    LayoutDef,
    LayoutError,
    ModuleDef,
    ModuleKind,
    ResourceDef,
    assemble,
    ref,
)

LAYOUTS = ("Standard",)
DISCOVERY_API_VERSION = "deckhouse.io/v1"

NETWORK_POLICY = "dvp.network_policy"
VM_CLASS = "dvp.virtual_machine_class"
IMAGE = {"ClusterVirtualImage": "dvp.cluster_virtual_image", "VirtualImage": "dvp.virtual_image"}
DISK = "dvp.virtual_disk"
SECRET = "dvp.cloud_init_secret"
VM = "dvp.virtual_machine"

PREFIX_LABEL = "dvp.deckhouse.io/cluster-prefix"
NODE_GROUP_LABEL = "dvp.deckhouse.io/node-group"
DESTRUCTIVE_ANNOTATION = "last_applied_destructive_vm_parameters"
DESTRUCTIVE_HASH_ANNOTATION = "last_applied_destructive_vm_parameters_hash"
ROOT_DISK_ANNOTATION = "last_applied_destructive_root_disk_parameters"
ADDITIONAL_DISK_ANNOTATION = "last_applied_destructive_additional_disk_parameters"
DATA_DEVICE_PREFIX = "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_"
#: The hash suffix of a node object's name (cut to find its role).
HASH_SUFFIX = "-[0-9a-f]{6}"
_TF_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def tf_json(value: Any) -> str:
    """Terraform's ``jsonencode``: object keys sorted, no spaces, UTF-8 kept, ``<``, ``>``,
    ``&`` and the line/paragraph separators escaped (Go's encoder)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in _TF_ESCAPES:
        text = text.replace(char, escaped)
    return text


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def vm_hash(params: dict[str, Any]) -> str:
    """A VM's ``h6``: of the parameters' JSON."""
    return sha256_hex(tf_json(params))[:6]


def disk_destructive(params: dict[str, Any]) -> tuple[str, str]:
    """A disk's destructive parameters' JSON and ``h6`` (of the JSON of that JSON)."""
    text = tf_json(params)
    return text, sha256_hex(tf_json(text))[:6]


#: The VM's own destructive parameters compared with a found VM's annotation.
_VM_FIELDS = ("cpu", "memory", "nodeSelector", "tolerations", "priorityClassName")


def _comparable(field: str, value: Any) -> Any:
    if field == "tolerations":  # Terraform's list(map(string)): every value a string
        return [{k: str(v) for k, v in t.items()} for t in value or [] if isinstance(t, dict)]
    if field == "nodeSelector":
        return value or {}
    return value


def same_destructive(want: dict[str, Any], annotation: str | None) -> bool:
    """Whether a found VM's ``last_applied_destructive_vm_parameters`` says what ``want`` does.

    Only the VM's own parameters are compared — cpu, memory, node selector, tolerations,
    priority class, and in upstream's shape the SSH key's hash — each only when the annotation
    has it: the disks' hashes (a disk's change is reported on the disk, never recreated here),
    the Auto address (the cloud's choice) and keys of other upstream versions
    (``cloudConfigHash``) are not. No (or unreadable) annotation: nothing to judge by, the
    same. This module's earlier shape has the fields at the top, ``memory`` a string."""
    try:
        have = json.loads(annotation) if annotation else None
    except json.JSONDecodeError:
        return True
    if not isinstance(have, dict):
        return True
    wanted = dict(want["virtualMachine"])
    fields: tuple[str, ...]
    if isinstance(have.get("virtualMachine"), dict):
        have = have["virtualMachine"]
        fields = (*_VM_FIELDS, "sshPublicKeyHash")
    else:
        wanted["memory"] = wanted["memory"]["size"]
        fields = _VM_FIELDS
    return all(
        _comparable(f, have[f]) == _comparable(f, wanted.get(f)) for f in fields if f in have
    )


def data_device(disk_name: str) -> str:
    """The data disk as the guest sees it: its SCSI serial, the md5 of the disk's name (the
    first 20 hex digits here: how many upstream keeps was not verified)."""
    return DATA_DEVICE_PREFIX + hashlib.md5(disk_name.encode()).hexdigest()[:20]


def cloud_init(hostname: str, ssh_key: str) -> str:
    document = {
        "hostname": hostname,
        "create_hostname_file": True,
        "ssh_pwauth": False,
        "ssh_authorized_keys": [ssh_key.strip()],
    }
    return "#cloud-config\n" + yaml.safe_dump(document, sort_keys=False)


class _Builder:
    def __init__(self, config: DVPClusterConfiguration, cluster: ClusterIdentity) -> None:
        self.c = config
        self.p = cluster.prefix
        self.uuid = cluster.uuid

    def _labels(self, hostname: str, **extra: str) -> dict[str, str]:
        return {
            r.MANAGED_BY_LABEL: r.MANAGED_BY_VALUE,
            r.CLUSTER_UUID_LABEL: self.uuid,
            r.HOSTNAME_LABEL: hostname,
            **extra,
        }

    # -- base-infrastructure ---------------------------------------------------------------
    def _network_policy(self) -> ResourceDef:
        namespace = self.c.provider.namespace
        pods = {"matchLabels": {r.CLUSTER_UUID_LABEL: self.uuid}}
        same_namespace = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        }

        def namespace_pods(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
            peer: dict[str, Any] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}
            }
            if labels:
                peer["podSelector"] = {"matchLabels": labels}
            return peer

        ingress_nginx = namespace_pods("d8-ingress-nginx", {"app": "controller"})
        metallb = namespace_pods("d8-metallb")
        ports = [{"protocol": "TCP", "port": p} for p in self.c.provider.ingressPorts]
        name = f"isolated-{self.p}"
        return ResourceDef(
            kind=NETWORK_POLICY,
            name=name,
            tags={r.CLUSTER_UUID_LABEL: self.uuid},
            properties={
                "spec": {
                    "podSelector": pods,
                    "policyTypes": ["Ingress", "Egress"],
                    "ingress": [
                        {"from": [same_namespace]},
                        {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": ports},
                        {"from": [ingress_nginx]},
                        {"from": [metallb]},
                    ],
                    "egress": [
                        {"to": [same_namespace]},
                        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]},
                        {"to": [ingress_nginx]},
                        {
                            "to": [namespace_pods("kube-system")],
                            "ports": [{"protocol": "UDP", "port": 53}],
                        },
                        {"to": [metallb]},
                    ],
                }
            },
            outputs=["id", "name"],
        )

    def base(self) -> ModuleDef:
        groups: list[DvpMasterInstanceClass | DvpNodeInstanceClass] = [
            self.c.masterNodeGroup.instanceClass,
            *(g.instanceClass for g in self.c.nodeGroups),
        ]
        classes = sorted({g.virtualMachine.virtualMachineClassName for g in groups})
        images = sorted({(g.rootDisk.image.kind, g.rootDisk.image.name) for g in groups})
        lookups = [
            ResourceDef(kind=VM_CLASS, name=name, read_only=True, outputs=["id", "name"])
            for name in classes
        ]
        lookups += [
            ResourceDef(kind=IMAGE[kind], name=name, read_only=True, outputs=["id", "name"])
            for kind, name in images
        ]
        resources = list(lookups)
        if self.c.provider.networkPolicy == "Isolated":
            policy = self._network_policy()
            policy.depends_on = [lookup.key for lookup in lookups]  # validation first
            resources.append(policy)
        return ModuleDef(id="base", module="base-infrastructure", resources=resources)

    # -- nodes -----------------------------------------------------------------------------
    def _disk(
        self,
        stems: list[str],
        hostname: str,
        size: str,
        storage_class: str | None,
        destructive: tuple[dict[str, Any], str],
        source: dict[str, Any] | None = None,
    ) -> tuple[ResourceDef, str]:
        """The disk named ``<stems[0]>-<h6>`` and its ``h6``."""
        params, annotation = destructive
        text, digest = disk_destructive(params)
        claim: dict[str, Any] = {"size": size}
        if storage_class:
            claim["storageClassName"] = storage_class
        spec: dict[str, Any] = {"persistentVolumeClaim": claim}
        if source is not None:
            spec["dataSource"] = source
        disk = ResourceDef(
            kind=DISK,
            name=f"{stems[0]}-{digest}",
            tags=self._labels(hostname),
            properties={
                "stems": stems,
                "created_annotations": {annotation: text, f"{annotation}_hash": digest},
                "spec": spec,
            },
            outputs=["id", "name", "device"],
        )
        return disk, digest

    def _node(
        self,
        module_id: str,
        module: ModuleKind,
        group: str,
        hostname: str,
        index: int,
        vm: DvpVirtualMachine,
        root: DvpRootDisk,
        additional: list[DvpAdditionalDisk],
        *,
        etcd: tuple[str, str | None] | None,
        extra_labels: dict[str, str],
        zones: list[str] | None,
    ) -> ModuleDef:
        if vm.ipAddresses and index < len(vm.ipAddresses) and vm.ipAddresses[index] != "Auto":
            raise LayoutError(
                f"{hostname}: static ipAddresses are not supported yet (use Auto or leave it out)"
            )
        image = {"kind": root.image.kind, "name": root.image.name}
        root_disk, root_hash = self._disk(
            [hostname],
            hostname,
            root.size,
            root.storageClass,
            (
                {"rootDisk": {"image": {"type": image["kind"], "name": image["name"]}}},
                ROOT_DISK_ANNOTATION,
            ),
            {"type": "ObjectRef", "objectRef": image},
        )
        disks = [root_disk]
        data_disk: ResourceDef | None = None
        hashes: dict[str, Any] = {"rootDiskHash": root_hash}
        if etcd is not None:
            size, storage_class = etcd
            data_disk, hashes["etcDiskHash"] = self._disk(
                [f"{self.p}-{group}-kubernetes-data-{index}"],
                hostname,
                size,
                storage_class,
                ({"kbernetesDataDisk": {}}, ROOT_DISK_ANNOTATION),  # upstream's key, sic
            )
            disks.append(data_disk)
        hashes["additionalDisksHash"] = []
        for j, extra in enumerate(additional):
            disk, digest = self._disk(
                [f"{self.p}-{group}-additional-disk-{j}-{index}", f"{hostname}-additional-{j}"],
                hostname,
                extra.size,
                extra.storageClass,
                ({"additionalDisk": {}}, ADDITIONAL_DISK_ANNOTATION),
            )
            disks.append(disk)
            hashes["additionalDisksHash"].append(digest)
        node_selector = dict(vm.nodeSelector)
        zone_list = sorted(set(zones or []))
        if zone_list:
            node_selector[r.ZONE_LABEL] = zone_list[index % len(zone_list)]
        if self.c.region:
            node_selector["topology.kubernetes.io/region"] = self.c.region
        destructive = {
            "virtualMachine": {
                "cpu": {"cores": vm.cpu.cores, "coreFraction": vm.cpu.coreFraction},
                "memory": {"size": vm.memory.size},
                "nodeSelector": node_selector,
                "tolerations": vm.tolerations or None,
                "priorityClassName": vm.priorityClassName,
                "ipAddress": None,  # DVP's Auto address, not known before (see the docstring)
                "sshPublicKeyHash": sha256_hex(tf_json(self.c.sshPublicKey)),
            },
            **hashes,
        }
        digest = vm_hash(destructive)
        user_data = cloud_init(hostname, self.c.sshPublicKey)
        secret = ResourceDef(
            kind=SECRET,
            name=f"{hostname}-cloudinit-{digest}",
            tags=self._labels(hostname),
            properties={
                "stems": [f"{hostname}-cloudinit"],
                "type": r.CLOUD_INIT_SECRET_TYPE,
                "userData": user_data,
                # the VM that boots from it: made anew, it must boot from the current data
                "vm": {
                    "name": f"{hostname}-{digest}",
                    "stems": [hostname],
                    "destructive": destructive,
                },
            },
            outputs=["id", "name"],
        )
        spec: dict[str, Any] = {
            "virtualMachineClassName": vm.virtualMachineClassName,
            "cpu": {"cores": vm.cpu.cores, "coreFraction": vm.cpu.coreFraction},
            "memory": {"size": vm.memory.size},
            "blockDeviceRefs": [{"kind": "VirtualDisk", "name": d.name} for d in disks],
            "provisioning": {
                "type": "UserDataRef",
                "userDataRef": {"kind": "Secret", "name": secret.name},
            },
            "runPolicy": vm.runPolicy,
            "liveMigrationPolicy": vm.liveMigrationPolicy,
            "osType": "Generic",
            "bootloader": vm.bootloader,
            "enableParavirtualization": True,
            "disruptions": {"restartApprovalMode": "Automatic"},
            "terminationGracePeriodSeconds": 90,
        }
        if node_selector:
            spec["nodeSelector"] = node_selector
        if vm.tolerations:
            spec["tolerations"] = vm.tolerations
        if vm.priorityClassName:
            spec["priorityClassName"] = vm.priorityClassName
        labels = {
            **vm.additionalLabels,
            **extra_labels,
            **self.c.provider.additionalVMLabels,
            **self._labels(hostname, **{PREFIX_LABEL: self.p, NODE_GROUP_LABEL: group}),
        }
        machine = ResourceDef(
            kind=VM,
            name=f"{hostname}-{digest}",
            tags=labels,
            depends_on=[d.key for d in disks] + [secret.key],
            properties={
                "stems": [hostname],
                # the disks and Secret the spec names, found as they are (another hash)
                "parts": {
                    d.name: {"kind": d.kind, "stems": d.properties["stems"]}
                    for d in [*disks, secret]
                },
                "annotations": dict(vm.additionalAnnotations),
                "created_annotations": {
                    DESTRUCTIVE_ANNOTATION: tf_json(destructive),
                    DESTRUCTIVE_HASH_ANNOTATION: digest,
                },
                "destructive": destructive,
                "spec": spec,
            },
            outputs=["id", "name", "ip"],
        )
        outputs: dict[str, Any] = {"node_internal_ip_address": ref(machine.key, "ip")}
        if data_disk is not None:
            outputs = {
                "master_ip_address_for_ssh": ref(machine.key, "ip"),
                **outputs,
                "kubernetes_data_device_path": ref(data_disk.key, "device"),
            }
        return ModuleDef(
            id=module_id,
            module=module,
            node_name=hostname,
            group=group,
            machine=secret.key,
            resources=[*disks, secret, machine],
            outputs=outputs,
        )

    def master(self, index: int) -> ModuleDef:
        group = self.c.masterNodeGroup
        ic = group.instanceClass
        return self._node(
            f"master-{index}",
            "master-node",
            "master",
            f"{self.p}-master-{index}",
            index,
            ic.virtualMachine,
            ic.rootDisk,
            ic.additionalDisks,
            etcd=(ic.etcdDisk.size, ic.etcdDisk.storageClass),
            extra_labels=ic.additionalLabels,
            zones=group.zones or self.c.zones,
        )

    def static(self, group_index: int, index: int) -> ModuleDef:
        group = self.c.nodeGroups[group_index]
        ic = group.instanceClass
        return self._node(
            f"static-{group.name}-{index}",
            "static-node",
            group.name,
            f"{self.p}-{group.name}-{index}",
            index,
            ic.virtualMachine,
            ic.rootDisk,
            ic.additionalDisks,
            etcd=None,
            extra_labels={},
            zones=group.zones or self.c.zones,
        )

    def discovery(self) -> dict[str, Any]:
        """``DVPCloudDiscoveryData`` as upstream's Terraform outputs it; the parent's
        StorageClasses (``storageClasses``) are the discoverer's to add."""
        return {
            "apiVersion": DISCOVERY_API_VERSION,
            "kind": DISCOVERY_KIND,
            "zones": sorted(set(self.c.zones or DEFAULT_ZONES)),
        }


def define(
    config: DVPClusterConfiguration, cluster: ClusterIdentity, zones: list[str]
) -> LayoutDef:
    """The layout's definitions; :class:`LayoutError` for what it cannot build."""
    return assemble(
        "dvp",
        config,
        cluster.prefix,
        cluster.uuid,
        lambda: _Builder(config, cluster),
        layouts=LAYOUTS,
    )
