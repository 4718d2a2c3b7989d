"""zVirt instances for node sync: batched VM lookups by ID or name, one search per 100 VMs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cloudloop.cloud import models
from cloudloop.cloud.zvirt.base import ZvirtBase, vm_view
from cloudloop.cloud.zvirt.mapping import (
    VmView,
    batches,
    is_uuid,
    searchable_name,
    to_instance,
    vm_id_from_provider_id,
)

#: One search returns each VM with its NICs and guest-reported devices (addresses) inlined.
INSTANCE_FOLLOW = "nics,reported_devices"


class ZvirtInstances:
    def __init__(self, session: ZvirtBase) -> None:
        self.session = session

    # -- instances -------------------------------------------------------------------------
    def instance_id_from_provider_id(self, provider_id: str) -> str:
        """``zvirt://<uuid>`` → the VM's UUID (lower case, as the engine writes it)."""
        return vm_id_from_provider_id(provider_id)

    def list_instances(self, ids: Sequence[str]) -> models.InstanceListing:
        """One ``GET /vms?search=id=a or id=b ...`` per 100 IDs; a malformed ID cannot exist."""
        wanted = [i.lower() for i in ids if is_uuid(i)]
        return self._search("id", wanted, key=lambda vm: vm.id)

    def find_instances_by_name(self, names: Sequence[str]) -> models.InstanceListing:
        """The VMs named like the nodes (capz names the VM after the Machine, the node too)."""
        wanted = [n for n in names if searchable_name(n)]
        return self._search("name", wanted, key=lambda vm: vm.name)

    def _search(
        self, field: str, values: list[str], *, key: Callable[[VmView], str]
    ) -> models.InstanceListing:
        listing = models.InstanceListing()
        wanted = set(values)
        for batch in batches(values):
            query, limit = batch.query(field), len(batch.terms)

            def search(api: Any, query: str = query, limit: int = limit) -> list[VmView]:
                found = api.vms_service().list(search=query, max=limit, follow=INSTANCE_FOLLOW)
                return [vm_view(vm) for vm in found]

            vms = self.session.call("ListVms", search)
            listing.requests += 1
            for vm in vms:
                if key(vm) in wanted:
                    listing.found[key(vm)] = to_instance(vm)
        return listing
