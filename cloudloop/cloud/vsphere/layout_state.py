"""Which Terraform resource types of Deckhouse's vSphere layouts are which layout resources.

The vSphere part's ``state_types`` (:class:`~cloudloop.layouts.tfstate.StateMapping` per type),
read by adoption (``cloudloop layout adopt``) and by ``publish`` when it writes the state
Secrets. Types are upstream's (``layouts.md`` §3): a folder's and a resource pool's ID is their
managed object reference, a virtual disk's its datastore path (``[datastore] path.vmdk``), a
VM's its BIOS UUID (``config.uuid``, or the moref a state ``publish`` wrote). Upstream makes a
pool per zone (``for_each`` over the zones), all named ``<prefix>``: the instance's key places
each. Datacenters, compute clusters, datastores, networks and
templates are ``data`` sources upstream (not in a state's managed resources).
"""

from __future__ import annotations

from cloudloop.cloud.vsphere import layout as defs
from cloudloop.layouts.tfstate import StateMapping

STATE_TYPES: dict[str, StateMapping] = {
    "vsphere_folder": StateMapping(defs.FOLDER, names=("path",)),
    "vsphere_resource_pool": StateMapping(
        defs.POOL, names=("name",), match=(("index_key", "zone"),)
    ),
    "vsphere_virtual_disk": StateMapping(
        defs.DISK, names=(), match=(("vmdk_path", "path"), ("datastore", "datastore"))
    ),
    "vsphere_virtual_machine": StateMapping(defs.VM, names=("name",)),
}
