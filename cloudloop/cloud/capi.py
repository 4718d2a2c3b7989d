"""The Cluster API kinds a cloud provides: its InfraMachine, InfraCluster and machine template.

A provider with a Cluster API provider declares one :class:`InfraKinds` in its package and puts
it in its provider record; the machine starter watches the kinds of every record.

Rules: pure data (no I/O); the contract's names and checks are in :mod:`cloudloop.rules.machine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloudloop.kube.resources import Resource

CAPI_GROUP = "cluster.x-k8s.io"
INFRA_GROUP = "infrastructure.cluster.x-k8s.io"


@dataclass(frozen=True)
class InfraKinds:
    """One provider's infrastructure kinds: its InfraMachine, InfraCluster and template."""

    provider: str
    machine: Resource
    cluster: Resource
    template: Resource
    #: The InfraMachine's finalizer (Deckhouse's name).
    finalizer: str
    #: ``spec`` fields the provider writes (never part of the desired VM).
    written_spec_fields: tuple[str, ...] = ("providerID",)
    #: ``spec`` field that takes the cloud's VM ID (zVirt ``spec.id``), if any.
    id_field: str = ""

    def desired_spec(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The InfraMachine's spec without the fields the provider writes back."""
        spec = dict(obj.get("spec") or {})
        for field in self.written_spec_fields:
            spec.pop(field, None)
        return spec
