"""The Cluster API kinds a cloud provides: its InfraMachine, InfraCluster and machine template,
and how a node manager builds its machine template from an InstanceClass.

A provider with a Cluster API provider declares one :class:`InfraKinds` in its package and puts
it in its provider record; the machine starter watches the kinds of every record. A provider whose
node groups come from InstanceClasses also declares :class:`NodeTemplates` (its InstanceClass and
the ``template.yaml`` contract shipped beside it).

Rules: pure data (no I/O); the contract's names and checks are in :mod:`cloudloop.rules.machine`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from cloudloop.kube.bodies import InfraObject, Secret
from cloudloop.kube.resources import Resource

CAPI_GROUP = "cluster.x-k8s.io"
INFRA_GROUP = "infrastructure.cluster.x-k8s.io"


@dataclass(frozen=True)
class InfraKinds:
    """One provider's infrastructure kinds: its InfraMachine, InfraCluster and template."""

    provider: str
    machine: Resource[InfraObject]
    cluster: Resource[InfraObject]
    template: Resource
    #: The InfraMachine's finalizer (Deckhouse's name).
    finalizer: str
    #: ``spec`` fields the provider writes (never part of the desired VM).
    written_spec_fields: tuple[str, ...] = ("providerID",)
    #: ``spec`` field that takes the cloud's VM ID (zVirt ``spec.id``), if any.
    id_field: str = ""

    def desired_spec(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The InfraMachine's spec without the fields the provider writes back."""
        spec = dict(obj.get("spec") or {})
        for field in self.written_spec_fields:
            spec.pop(field, None)
        return spec


#: Where Deckhouse's node manager finds a provider's machine-template contract.
TEMPLATES_SECRET_NAMESPACE = "kube-system"
TEMPLATES_LABEL = "cloud-provider.deckhouse.io/ephemeral-nodes-templates"
PROVIDER_NAME_LABEL = "cloud-provider.deckhouse.io/name"
CONTRACT_KEY = "template.yaml"


@dataclass(frozen=True)
class NodeTemplates:
    """A provider's node groups: its InstanceClass kind and its machine-template contract.

    ``package`` and ``contract_file`` locate the ``template.yaml`` (Deckhouse's v2 contract)
    shipped in the provider's package: one Go template, published for Deckhouse's node manager
    and rendered by ``cloudloop nodegroup render``.
    """

    provider: str
    #: The cluster-scoped ``deckhouse.io`` InstanceClass (DVPInstanceClass, ZvirtInstanceClass).
    instance_class: Resource
    package: str
    contract_file: str = CONTRACT_KEY

    def contract_text(self) -> str:
        return files(self.package).joinpath(self.contract_file).read_text()

    def secret(self) -> Secret:
        """``kube-system/d8-cloud-provider-<name>-capi``: the contract where the node manager
        reads it (beside the registration Secret, labelled as Deckhouse's modules label it)."""
        text = self.contract_text()
        return {
            "metadata": {
                "name": f"d8-cloud-provider-{self.provider}-capi",
                "namespace": TEMPLATES_SECRET_NAMESPACE,
                "labels": {
                    TEMPLATES_LABEL: "capi",
                    PROVIDER_NAME_LABEL: self.provider,
                    "app.kubernetes.io/managed-by": "cloudloop",
                },
            },
            "type": "Opaque",
            "data": {CONTRACT_KEY: base64.b64encode(text.encode()).decode()},
        }
