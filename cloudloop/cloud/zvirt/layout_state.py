"""Which Terraform resource types of Deckhouse's zVirt layout are which layout resources.

The zVirt part's ``state_types`` (:class:`~cloudloop.layouts.tfstate.StateMapping` per type),
read by adoption (``cloudloop layout adopt``) and by ``publish`` when it writes the state
Secrets. Types are upstream's (``layouts.md`` §4, the ``ovirt/ovirt`` provider): every node
state holds one of each, so the node's scope places them. A VM's, NIC's and disk's ID is the
engine's; a disk attachment's is its disk's (the engine's attachment ID), a start's its VM's.
``ovirt_disk_resize`` (the boot disk grown) is part of the VM here: skipped. The base
infrastructure makes nothing (its state has no managed resources).
"""

from __future__ import annotations

from cloudloop.cloud.zvirt import layout as defs
from cloudloop.layouts.tfstate import StateMapping

NAMES = ("name",)

STATE_TYPES: dict[str, StateMapping] = {
    "ovirt_vm": StateMapping(defs.VM, names=NAMES, match=(("cluster_id", "cluster_id"),)),
    "ovirt_disk_resize": StateMapping(""),
    "ovirt_nic": StateMapping(defs.NIC, names=(), match=(("vm_id", "vm_id"), ("name", "name"))),
    "ovirt_disk": StateMapping(
        defs.DISK, names=("alias",), match=(("storage_domain_id", "storage_domain_id"),)
    ),
    "ovirt_disk_attachment": StateMapping(
        defs.ATTACHMENT, names=(), match=(("vm_id", "vm_id"), ("disk_id", "disk_id"))
    ),
    "ovirt_vm_start": StateMapping(defs.START, names=(), match=(("vm_id", "vm_id"),)),
}
