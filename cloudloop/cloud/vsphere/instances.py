"""vSphere instances for node sync: one inventory read and one tag listing per pass, any size.

``list_instances`` and ``find_instances_by_name`` both answer from :meth:`VsphereBase.inventory`
(one property-collector retrieval) and :meth:`VsphereBase.tags_by_object` (one association call).
Why only a UUID proves absence:
docs/decisions/0045-vsphere-configuration-and-lookups-as-upstream.md.

Rules (cloud-provider-vsphere ``instances.go``, ``nodemanager.go``):
- By ID: the BIOS UUID as given, else its byte-swapped SMBIOS form. A UUID no VM has is absent
  (the read succeeded); any vCenter error raises (nothing is deleted).
- By name: ``guest.hostName`` first, else a guest IP equal to the name, else the VM name. A miss
  or an ambiguous match is *undecided*, never absent.
- By-name lookups may answer from a read up to ``name_lookup_reuse_s`` old when it resolves every
  name; an undecided name costs one fresh read. Lookups by ID always read afresh.
- A powered-on VM whose guest reports no usable address is undecided; a powered-off one is
  returned (so the shutdown taint applies) with what addresses it has.
- Zones (upstream ``GetZone``): with both tag categories configured, a VM no tag places gets
  ``init_error``; such a miss reads the tag names again (at most every :data:`TAG_MISS_REFRESH_S`).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable, Sequence

from cloudloop.cloud import errors, models
from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.mapping import (
    PROVIDER,
    PROVIDER_ID_PREFIX,
    AddressError,
    Inventory,
    VmProps,
    instance_state,
    instance_type,
    is_uuid,
    node_addresses,
    provider_id,
    swap_uuid_bytes,
    zone_for,
)

log = logging.getLogger(__name__)

#: A VM without a zone reads the tag names again when they are older than this.
TAG_MISS_REFRESH_S = 5.0


class VsphereInstances:
    def __init__(self, session: VsphereBase) -> None:
        self.session = session

    def instance_id_from_provider_id(self, provider_id: str) -> str:
        """``vsphere://<uuid>`` → the lower-case UUID; anything else is not this cloud's."""
        if not provider_id.startswith(PROVIDER_ID_PREFIX):
            raise errors.InvalidRequest(
                PROVIDER, "ParseProviderID", f"{provider_id!r} is not a vsphere:// providerID"
            )
        uuid = provider_id[len(PROVIDER_ID_PREFIX) :].strip("/").lower()
        if not is_uuid(uuid):
            raise errors.InvalidRequest(
                PROVIDER, "ParseProviderID", f"{provider_id!r} has no BIOS UUID"
            )
        return uuid

    def _snapshot(
        self, *, reuse: bool = False
    ) -> tuple[Inventory, dict[str, list[tuple[str, str]]], int]:
        """The inventory and its zone tags: read fresh (2 round trips), or with ``reuse`` a
        read younger than ``name_lookup_reuse_s`` (by-name lookups never prove absence, so a
        slightly old answer can only delay an init, never delete a node)."""
        cached = self.session._last_snapshot
        if (
            reuse
            and cached is not None
            and time.monotonic() - cached[0] < (self.session.settings.name_lookup_reuse_s)
        ):
            return cached[1], cached[2], 0
        conn = self.session.connection()
        inventory = self.session.inventory()
        tags = self.session.tags_by_object([conn.region_category, conn.zone_category])
        self.session._last_snapshot = (time.monotonic(), inventory, tags)
        return inventory, tags, 2

    def _in_scope(self, inventory: Inventory, vm: VmProps) -> bool:
        datacenters = self.session.connection().datacenters
        return not datacenters or inventory.datacenter_of(vm.moref) in datacenters

    def _instance(
        self,
        inventory: Inventory,
        tags: dict[str, list[tuple[str, str]]],
        vm: VmProps,
    ) -> models.Instance | None:
        """The instance of ``vm``; ``None`` when it is powered on but its guest gives no
        usable address yet (undecided)."""
        conn = self.session.connection()
        state = instance_state(vm.power_state)
        try:
            addresses = node_addresses(vm, conn.nodes, conn.ip_families)
        except AddressError as exc:
            if state is models.InstanceState.RUNNING:
                log.info("vsphere: VM %s (%s) not discoverable yet: %s", vm.name, vm.uuid, exc)
                return None
            addresses = []
        region, zone = zone_for(inventory, vm, tags, conn.region_category, conn.zone_category)
        init_error = ""
        if conn.region_category and conn.zone_category and not (region and zone):
            missing = conn.zone_category if not zone else conn.region_category
            init_error = (
                f"vSphere {'zone' if not zone else 'region'} category {missing!r} matches no tag "
                f"on VM {vm.name} or its host, cluster, resource pool or folders"
            )
        return models.Instance(
            id=vm.uuid,
            provider_id=provider_id(vm.uuid),
            name=vm.name,
            state=state,
            instance_type=instance_type(vm.num_cpu, vm.memory_mb, vm.guest_id),
            zone=zone,
            region=region,
            private_dns_name=vm.hostname,
            addresses=addresses,
            init_error=init_error,
        )

    def list_instances(self, ids: Sequence[str]) -> models.InstanceListing:
        return self._zone_tags_fresh_on_miss(lambda: self._by_id(ids))

    def _zone_tags_fresh_on_miss(
        self, lookup: Callable[[], models.InstanceListing]
    ) -> models.InstanceListing:
        """``lookup()``, once more with the tag names read again when a VM found has no zone
        and the names are older than :data:`TAG_MISS_REFRESH_S`: a zone tag made shortly
        before its Node joined is seen at once (upstream reads tags on every lookup), while
        passes over zoned VMs keep the cached names (``tag_cache_s``)."""
        listing = lookup()
        missing = any(i.init_error for i in listing.found.values())
        if missing and time.monotonic() - self.session._tags_read_at > TAG_MISS_REFRESH_S:
            self.session._tags_read_at = (
                0.0  # stale: the next association read lists the names again
            )
            self.session._last_snapshot = None
            first = listing.requests
            listing = lookup()
            listing.requests += first
        return listing

    def _by_id(self, ids: Sequence[str]) -> models.InstanceListing:
        listing = models.InstanceListing()
        wanted = [i.lower() for i in ids]
        if not wanted:
            return listing
        inventory, tags, listing.requests = self._snapshot()
        by_uuid = {vm.uuid: vm for vm in inventory.vms.values() if self._in_scope(inventory, vm)}
        for key in wanted:
            vm = by_uuid.get(key) or by_uuid.get(swap_uuid_bytes(key)) if is_uuid(key) else None
            if vm is None:
                continue
            instance = self._instance(inventory, tags, vm)
            if instance is None:
                listing.undecide(key, f"VM {vm.name} is on but its guest reports no address yet")
            else:
                listing.found[key] = instance
        return listing

    def find_instances_by_name(self, names: Sequence[str]) -> models.InstanceListing:
        if not names:
            return models.InstanceListing()

        def lookup() -> models.InstanceListing:
            listing = self._by_name(names, reuse=True)
            if listing.undecided and listing.requests == 0:
                # The young cached read does not answer every name (a VM made or reporting
                # since): read afresh rather than leave a node waiting for the cache to age.
                listing = self._by_name(names, reuse=False)
            return listing

        return self._zone_tags_fresh_on_miss(lookup)

    def _by_name(self, names: Sequence[str], *, reuse: bool) -> models.InstanceListing:
        listing = models.InstanceListing()
        inventory, tags, listing.requests = self._snapshot(reuse=reuse)
        vms = [vm for vm in inventory.vms.values() if self._in_scope(inventory, vm)]
        for name in names:
            matches, by = _match_by_name(vms, name)
            if len(matches) != 1:
                listing.undecide(
                    name,
                    f"{len(matches)} VMs match {name!r} by {by} "
                    f"({', '.join(vm.name for vm in matches)}); set the node's providerID"
                    if matches
                    else f"no VM matches {name!r} by guest host name, IP address or VM name",
                )
                continue
            instance = self._instance(inventory, tags, matches[0])
            if instance is None:
                listing.undecide(
                    name, f"VM {matches[0].name} is on but its guest reports no address yet"
                )
            else:
                listing.found[name] = instance
        return listing


def _match_by_name(vms: list[VmProps], name: str) -> tuple[list[VmProps], str]:
    """DNS (``guest.hostName``), then IP, then VM name: the VMs of the first rule that matches
    any, and the rule; one VM is a match, none or several are not."""
    lowered = name.lower()
    by_dns = [vm for vm in vms if vm.hostname.lower() == lowered]
    if by_dns:
        return by_dns, "guest host name"
    try:
        ip = str(ipaddress.ip_address(name))
    except ValueError:
        ip = ""
    if ip:
        by_ip = [vm for vm in vms if any(ip in nic.ips for nic in vm.nics)]
        if by_ip:
            return by_ip, "IP address"
    return [vm for vm in vms if vm.name == name], "VM name"
