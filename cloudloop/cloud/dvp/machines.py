"""DVP machines for Cluster API: a VirtualMachine with its boot and additional VirtualDisks and its
cloud-init Secret, created the way Deckhouse's capdvp creates them.

The VM is created first; the cloud-init Secret ``cloud-init-<name>`` and the disks ``<name>-boot``
and ``<name>-additional-disk-<i>`` are owned by it. Everything carries the InfraMachine's UID
(``cloudloop.io/machine-uid``), so a retried create adopts what an earlier attempt made and
never takes over another machine's objects. Deletion detaches hot-plugged disks, deletes the VM
and, once it is gone, the disks and the Secret.
"""

from __future__ import annotations

import base64
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import DEFAULT_ZONES, NAME, PROVIDER_ID_PREFIX, DvpBase
from cloudloop.cloud.dvp.spec import DeckhouseMachineSpec, parse_spec
from cloudloop.kube.resources import Resource

DEFAULT_RUN_POLICY = "AlwaysOnUnlessStoppedManually"

_PHASE_STATE = {
    "Pending": models.InstanceState.PENDING,
    "Starting": models.InstanceState.PENDING,
    "Running": models.InstanceState.RUNNING,
    "Migrating": models.InstanceState.RUNNING,
    "Stopping": models.InstanceState.STOPPING,
    "Stopped": models.InstanceState.STOPPED,
    "Terminating": models.InstanceState.STOPPING,
}


def vm_state(vm: dict[str, Any]) -> tuple[str, models.InstanceState]:
    phase = str((vm.get("status") or {}).get("phase") or "Pending")
    return phase, _PHASE_STATE.get(phase, models.InstanceState.UNKNOWN)


def vm_addresses(vm: dict[str, Any]) -> list[models.NodeAddress]:
    """Hostname and InternalDNS (the VM name, so kubelet CSRs get approved), then the IP as
    InternalIP and ExternalIP: what capdvp writes."""
    name = vm["metadata"]["name"]
    addresses = [
        models.NodeAddress(type="Hostname", address=name),
        models.NodeAddress(type="InternalDNS", address=name),
    ]
    ip = (vm.get("status") or {}).get("ipAddress")
    if ip:
        addresses += [
            models.NodeAddress(type="InternalIP", address=ip),
            models.NodeAddress(type="ExternalIP", address=ip),
        ]
    return addresses


def _not_true_message(obj: dict[str, Any]) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "False" and condition.get("message"):
            return f"{condition.get('type')}: {condition['message']}"
    return ""


def owner_reference(vm: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": r.API_VERSION,
        "kind": "VirtualMachine",
        "name": vm["metadata"]["name"],
        "uid": vm["metadata"]["uid"],
    }


class DvpMachines:
    def __init__(self, session: DvpBase) -> None:
        self.session = session

    # -- labels and bodies -----------------------------------------------------------------
    def _labels(self, spec: models.MachineSpec, **extra: str) -> dict[str, str]:
        return {
            **self.session.cluster_labels(),
            r.HOSTNAME_LABEL: spec.name,
            r.MACHINE_UID_LABEL: spec.machine_uid,
            **extra,
        }

    def _owned(self, obj: dict[str, Any], spec: models.MachineSpec) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels.get(r.MACHINE_UID_LABEL) == spec.machine_uid

    def zone_selector(self, spec: models.MachineSpec) -> dict[str, str]:
        """The machine's failure domain as a parent-node selector (only for configured zones:
        DVP's mock ``default`` zone, configured or not, places nothing)."""
        zone = spec.failure_domain
        mock_only = self.session.settings.zones in ([], list(DEFAULT_ZONES))
        if not zone or (mock_only and zone in DEFAULT_ZONES):
            return {}
        if zone not in self.session.settings.zones:
            known = ", ".join(self.session.settings.zones or DEFAULT_ZONES)
            raise errors.InvalidRequest(
                NAME, "CreateVirtualMachine", f"zone {zone!r} is not a configured zone ({known})"
            )
        return {r.ZONE_LABEL: zone}

    def _vm_body(self, spec: models.MachineSpec, vm: DeckhouseMachineSpec) -> dict[str, Any]:
        disks = [r.boot_disk_name(spec.name)] + [
            r.additional_disk_name(spec.name, i) for i in range(len(vm.additional_disks))
        ]
        migration = vm.live_migration_policy or (
            "PreferForced" if spec.control_plane else "PreferSafe"
        )
        placement: dict[str, Any] = {}
        node_selector = {**vm.node_selector, **self.zone_selector(spec)}
        if node_selector:
            placement["nodeSelector"] = node_selector
        if vm.tolerations:
            placement["tolerations"] = vm.tolerations
        if vm.priority_class_name:
            placement["priorityClassName"] = vm.priority_class_name
        metadata: dict[str, Any] = {
            "name": spec.name,
            "namespace": self.session.namespace,
            "labels": {
                **vm.additional_labels,
                **self.session.settings.additional_vm_labels,
                **self._labels(spec),
            },
        }
        if vm.additional_annotations:
            metadata["annotations"] = dict(vm.additional_annotations)
        return {
            "metadata": metadata,
            "spec": {
                **placement,
                "virtualMachineClassName": vm.vm_class_name,
                "cpu": {"cores": vm.cpu.cores, "coreFraction": vm.cpu.cpu_fraction},
                "memory": {"size": vm.memory},
                "blockDeviceRefs": [{"kind": "VirtualDisk", "name": d} for d in disks],
                "provisioning": {
                    "type": "UserDataRef",
                    "userDataRef": {"kind": "Secret", "name": r.cloud_init_secret_name(spec.name)},
                },
                "runPolicy": vm.run_policy or DEFAULT_RUN_POLICY,
                "liveMigrationPolicy": migration,
                "osType": "Generic",
                "bootloader": vm.bootloader,
                "enableParavirtualization": True,
            },
        }

    def _disk_bodies(
        self, spec: models.MachineSpec, vm: DeckhouseMachineSpec, owner: dict[str, Any]
    ) -> list[dict[str, Any]]:
        def disk(name: str, size: str, storage_class: str, extra: dict[str, Any]) -> dict[str, Any]:
            return {
                "metadata": {
                    "name": name,
                    "namespace": self.session.namespace,
                    "labels": self._labels(spec, **{r.DISK_NAME_LABEL: name}),
                    "ownerReferences": [owner],
                },
                "spec": {
                    **extra,
                    "persistentVolumeClaim": {"storageClassName": storage_class, "size": size},
                },
            }

        image = vm.boot_disk_image_ref
        bodies = [
            disk(
                r.boot_disk_name(spec.name),
                vm.root_disk_size,
                vm.root_disk_storage_class,
                {
                    "dataSource": {
                        "type": "ObjectRef",
                        "objectRef": {"kind": image.kind, "name": image.name},
                    }
                },
            )
        ]
        for i, extra_disk in enumerate(vm.additional_disks):
            bodies.append(
                disk(
                    r.additional_disk_name(spec.name, i),
                    extra_disk.size,
                    extra_disk.storage_class,
                    {},
                )
            )
        return bodies

    def _secret_body(
        self, spec: models.MachineSpec, user_data: bytes, owner: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "metadata": {
                "name": r.cloud_init_secret_name(spec.name),
                "namespace": self.session.namespace,
                "labels": self._labels(spec),
                "ownerReferences": [owner],
            },
            "type": r.CLOUD_INIT_SECRET_TYPE,
            "data": {r.CLOUD_INIT_KEY: base64.b64encode(user_data).decode()},
        }

    # -- create ----------------------------------------------------------------------------
    def _validate_references(self, vm: DeckhouseMachineSpec) -> None:
        """The image and the VM class must exist before a VM is made (as capdvp checks)."""
        image = vm.boot_disk_image_ref
        if not self.session.exists(r.IMAGE_RESOURCES[image.kind], image.name):
            raise errors.InvalidRequest(
                NAME, "CreateVirtualMachine", f"{image.kind} {image.name!r} does not exist"
            )
        if not self.session.exists(r.VIRTUAL_MACHINE_CLASSES, vm.vm_class_name):
            raise errors.InvalidRequest(
                NAME,
                "CreateVirtualMachine",
                f"VirtualMachineClass {vm.vm_class_name!r} does not exist",
            )

    def _create_or_adopt(
        self, resource: Resource, body: dict[str, Any], spec: models.MachineSpec
    ) -> dict[str, Any]:
        name = body["metadata"]["name"]
        created = self.session.create(resource, body)
        if created is not None:
            return created
        existing = self.session.get(resource, name)
        if existing is None:  # deleted in between: try once more
            created = self.session.create(resource, body)
            if created is not None:
                return created
            existing = self.session.get(resource, name)
        if existing is None or not self._owned(existing, spec):
            raise errors.AlreadyExists(
                NAME,
                f"Create{resource.kind}",
                f"{resource.kind} {name!r} exists and belongs to another machine",
            )
        return existing

    def create_machine(self, spec: models.MachineSpec, user_data: bytes) -> models.Machine:
        vm_spec = parse_spec(spec.provider_spec)
        vm = self.session.get(r.VIRTUAL_MACHINES, spec.name)
        if vm is None:
            self._validate_references(vm_spec)
            vm = self._create_or_adopt(r.VIRTUAL_MACHINES, self._vm_body(spec, vm_spec), spec)
        elif not self._owned(vm, spec):
            raise errors.AlreadyExists(
                NAME,
                "CreateVirtualMachine",
                f"VirtualMachine {spec.name!r} exists and belongs to another machine",
            )
        if vm["metadata"].get("deletionTimestamp"):
            raise errors.CloudError(
                NAME, "CreateVirtualMachine", f"VirtualMachine {spec.name!r} is being deleted"
            )
        owner = owner_reference(vm)
        secret = self._secret_body(spec, user_data, owner)
        existing = self._create_or_adopt(r.SECRETS, secret, spec)
        if (existing.get("data") or {}).get(r.CLOUD_INIT_KEY) != secret["data"][r.CLOUD_INIT_KEY]:
            self.session.patch(r.SECRETS, secret["metadata"]["name"], {"data": secret["data"]})
        for disk in self._disk_bodies(spec, vm_spec, owner):
            self._create_or_adopt(r.VIRTUAL_DISKS, disk, spec)
        return self.to_machine(vm)

    # -- get -------------------------------------------------------------------------------
    def get_machine(self, spec: models.MachineSpec) -> models.Machine | None:
        vm = self.session.get(r.VIRTUAL_MACHINES, spec.name)
        if vm is None or not self._owned(vm, spec):
            return None
        return self.to_machine(vm)

    def to_machine(self, vm: dict[str, Any]) -> models.Machine:
        phase, state = vm_state(vm)
        return models.Machine(
            id=vm["metadata"]["name"],
            provider_id=PROVIDER_ID_PREFIX + vm["metadata"]["name"],
            state=state,
            phase=phase,
            addresses=vm_addresses(vm),
            message=_not_true_message(vm),
            failed=phase == "Degraded",
        )

    # -- delete ----------------------------------------------------------------------------
    def delete_machine(self, spec: models.MachineSpec) -> bool:
        """Detach hot-plugged disks, delete the VM; once it is gone, its disks and Secret.

        Each call does the next step and returns: one GET while the VM is still stopping.
        """
        vm = self.session.get(r.VIRTUAL_MACHINES, spec.name)
        if vm is not None and self._owned(vm, spec):
            if vm["metadata"].get("deletionTimestamp"):
                return False  # stopping; disks go once the VM no longer uses them
            if self._detach_all(spec) or self._delete_object(r.VIRTUAL_MACHINES, vm):
                return False
        remaining = self._detach_all(spec)
        selector = f"{r.MACHINE_UID_LABEL}={spec.machine_uid}"
        for resource in (r.VIRTUAL_DISKS, r.SECRETS):
            for obj in self.session.list_objects(resource, label_selector=selector):
                if self._delete_object(resource, obj):
                    remaining = True
        return not remaining

    def _detach_all(self, spec: models.MachineSpec) -> bool:
        """Delete the VM's block-device attachments; True while any is still there."""
        remaining = False
        for attachment in self.session.list_objects(
            r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS,
            label_selector=f"{r.ATTACHMENT_MACHINE_LABEL}={spec.name}",
        ):
            if self._delete_object(r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, attachment):
                remaining = True
        return remaining

    def _delete_object(self, resource: Resource, obj: dict[str, Any]) -> bool:
        """Delete ``obj`` unless it is already going; True while it is still there."""
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return True
        return self.session.delete(resource, meta["name"]) == "deleting"
