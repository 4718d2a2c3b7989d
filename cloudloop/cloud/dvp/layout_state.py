"""Which Terraform resources of Deckhouse's DVP layout are which layout resources.

The DVP part's ``state_types`` (:class:`~cloudloop.layouts.tfstate.StateMapping` per type), read
by adoption (``cloudloop layout adopt``) and by ``publish`` when it writes the state Secrets.
Upstream (``layouts.md`` §5, ``<dvp>/terraform-modules/*/main.tf``) makes the VM, its disks, its
``VirtualMachineIPAddress`` and the base's NetworkPolicy as ``kubernetes_manifest`` resources —
one Terraform type for every kind — so those are placed by the object's kind (``object.kind``,
else ``manifest.kind``); the cloud-init Secret is a ``kubernetes_secret``. An object's ID is its
name in the namespace. A node state holds one VM, one Secret and several disks: the disks are
told apart by name with the hash suffix cut (``<hostname>`` the root disk,
``<prefix>-master-kubernetes-data-<i>`` the data disk), so a state written with other hashes
still places them. Skipped, not reported: the ``VirtualMachineIPAddress`` (no such resource
here: the VM's address is DVP's Auto one), ``kubernetes_owner_references_v1`` and
``kubernetes_resource_ready_v1`` (parts of the objects they point at). Only these attributes are
read: a state's ``object``/``manifest`` also holds the cloud-init data, never kept.
"""

from __future__ import annotations

from cloudloop.cloud.dvp import layout as defs
from cloudloop.layouts.tfstate import StateMapping

MANIFEST = "kubernetes_manifest"
KIND = ("object.kind", "manifest.kind")
MANIFEST_NAME = "object.metadata.name"
SECRET_NAME = "metadata.0.name"


def _manifest(kind: str, layout_kind: str) -> StateMapping:
    return StateMapping(
        layout_kind,
        names=(MANIFEST_NAME, "manifest.metadata.name"),
        id=MANIFEST_NAME,
        tf_type=MANIFEST,
        select=KIND,
        select_value=kind,
        strip=defs.HASH_SUFFIX,
        found_name=True,
    )


STATE_TYPES: dict[str, StateMapping] = {
    f"{MANIFEST}/VirtualMachine": _manifest("VirtualMachine", defs.VM),
    f"{MANIFEST}/VirtualDisk": _manifest("VirtualDisk", defs.DISK),
    f"{MANIFEST}/NetworkPolicy": _manifest("NetworkPolicy", defs.NETWORK_POLICY),
    "kubernetes_secret": StateMapping(
        defs.SECRET, names=(SECRET_NAME,), id=SECRET_NAME, strip=defs.HASH_SUFFIX, found_name=True
    ),
    f"{MANIFEST}/Secret": _manifest("Secret", defs.SECRET),
    f"{MANIFEST}/VirtualMachineIPAddress": _manifest("VirtualMachineIPAddress", ""),
    "kubernetes_owner_references_v1": StateMapping(""),
    "kubernetes_resource_ready_v1": StateMapping(""),
}
