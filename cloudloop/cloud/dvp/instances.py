"""DVP instances for node sync: the cluster's VMs in one LIST, matched by name or hostname label.

A Node's providerID is ``dvp://<vm-name>``; a Node is matched by name through the VM's
``dvp.deckhouse.io/hostname`` label (as Deckhouse's CCM does). A VM missing from the answer
positively does not exist; a Stopped VM is a shut-down instance.

Zones: DVP has none of its own; Deckhouse announces the configured ones (``default`` when none).
A VM's zone is where it is placed: its ``nodeSelector`` (or required node affinity) on
``topology.kubernetes.io/zone``; a VM not pinned to a zone is in the single configured zone. Only
zones discovery reports are written (a pin to another zone, or no pin among several zones, gives
no zone label rather than a guess); the region is ``default``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import DEFAULT_ZONES, NAME, PROVIDER_ID_PREFIX, REGION, DvpBase
from cloudloop.cloud.dvp.machines import vm_state


def vm_zone(vm: dict[str, Any], zones: Sequence[str]) -> str:
    """The zone ``vm`` is placed in, if it is one of ``zones`` (see the module rules)."""
    spec = vm.get("spec") or {}
    pinned = {str((spec.get("nodeSelector") or {}).get(r.ZONE_LABEL) or "")} - {""}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            values = expression.get("values") or []
            is_zone = expression.get("key") == r.ZONE_LABEL and expression.get("operator") == "In"
            if is_zone and len(values) == 1:
                pinned.add(str(values[0]))
    if len(pinned) == 1:
        zone = pinned.pop()
        return zone if zone in zones else ""
    return zones[0] if len(zones) == 1 and not pinned else ""


def vm_instance(vm: dict[str, Any], zones: Sequence[str] = DEFAULT_ZONES) -> models.Instance:
    """The Instance of a VM; addresses in Deckhouse's CCM order (ExternalIP, InternalIP,
    Hostname)."""
    meta = vm["metadata"]
    labels = meta.get("labels") or {}
    hostname = labels.get(r.HOSTNAME_LABEL, meta["name"])
    ip = (vm.get("status") or {}).get("ipAddress")
    addresses = []
    if ip:
        addresses += [
            models.NodeAddress(type="ExternalIP", address=ip),
            models.NodeAddress(type="InternalIP", address=ip),
        ]
    addresses.append(models.NodeAddress(type="Hostname", address=hostname))
    _, state = vm_state(vm)
    return models.Instance(
        id=meta["name"],
        provider_id=PROVIDER_ID_PREFIX + meta["name"],
        name=meta["name"],
        state=state,
        # The VM's class is its shape in DVP (CPU model, sizing policy): the node's type.
        instance_type=str((vm.get("spec") or {}).get("virtualMachineClassName") or ""),
        private_dns_name=hostname,
        zone=vm_zone(vm, zones),
        region=REGION,
        addresses=addresses,
        tags=dict(labels),
    )


class DvpInstances:
    def __init__(self, session: DvpBase) -> None:
        self.session = session

    def instance_id_from_provider_id(self, provider_id: str) -> str:
        """``dvp://<vm-name>`` (or ``dvp:///<vm-name>``) → the VM name."""
        if not provider_id.startswith(PROVIDER_ID_PREFIX):
            raise errors.InvalidRequest(
                NAME, "ParseProviderID", f"not a DVP providerID: {provider_id!r}"
            )
        name = provider_id[len(PROVIDER_ID_PREFIX) :].strip("/")
        if not name or "/" in name:
            raise errors.InvalidRequest(NAME, "ParseProviderID", f"no VM name in {provider_id!r}")
        return name

    def list_instances(self, ids: Sequence[str]) -> models.InstanceListing:
        return self._listing(set(ids), key=lambda i: i.id)

    def find_instances_by_name(self, names: Sequence[str]) -> models.InstanceListing:
        return self._listing(set(names), key=lambda i: i.private_dns_name)

    def _listing(
        self, wanted: set[str], *, key: Callable[[models.Instance], str]
    ) -> models.InstanceListing:
        """One LIST of the cluster's VMs (one request per 500), filtered here."""
        listing = models.InstanceListing()
        if not wanted:
            return listing
        vms, listing.requests = self.session.list_object_pages(
            r.VIRTUAL_MACHINES, label_selector=self.session.cluster_selector()
        )
        zones = self.session.settings.zones or list(DEFAULT_ZONES)
        for vm in vms:
            instance = vm_instance(vm, zones)
            if key(instance) in wanted:
                listing.found[key(instance)] = instance
        return listing
