"""A node group without Deckhouse: InstanceClass + zones → MachineDeployment + InfraMachineTemplate.

``cloudloop nodegroup render`` prints, for each zone, the provider's InfraMachineTemplate rendered
from its ``template.yaml`` and a Cluster API ``MachineDeployment`` pointing at it, the way
Deckhouse's node manager builds them; ``kubectl apply`` the output, ``kubectl scale`` the group.

Rules (Deckhouse's node manager):
- Names: the MachineDeployment is ``<group>-<sha256(clusterUUID + zone)[:8]>`` (stable across
  InstanceClass changes, so ``kubectl scale`` keeps working); the template is
  ``<group>-<digest of cluster UUID, zone and the rollout fields' values>``, so changing a rollout
  field makes a new template and re-applying rolls the machines (CAPI rolls on the template name),
  while any other change keeps the name and reaches machines with the next rollout.
- The template carries the InstanceClass snapshot (``node.deckhouse.io/applied-instance-class``)
  and the labels ``node-group`` and ``cluster.x-k8s.io/cluster-name``.
- Rolling update: ``maxSurge`` 1, ``maxUnavailable`` 0 by default (Deckhouse's per zone). CAPI
  removes an old machine only once a new one is Available (its Node ready), so a group whose
  machines never join (no workload cluster) needs ``maxUnavailable`` ≥ 1 to roll.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from cloudloop.cloud.capi import CAPI_GROUP, InfraKinds, NodeTemplates
from cloudloop.nodegroup.contract import Contract, ContractError, RenderContext

MACHINE_DEPLOYMENT_API_VERSION = f"{CAPI_GROUP}/v1beta2"
NODE_GROUP_LABEL = "node-group"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
APPLIED_INSTANCE_CLASS = "node.deckhouse.io/applied-instance-class"
INSTANCE_CLASS_ANNOTATION = "node.deckhouse.io/instance-class"
DEFAULT_ZONE = "default"


@dataclass(frozen=True)
class Bootstrap:
    """Where machines get their bootstrap data: one Secret for all (``dataSecretName``, as
    Deckhouse does) or a bootstrap provider's config template (``configRef``)."""

    data_secret_name: str = ""
    config_template_kind: str = "KubeadmConfigTemplate"
    config_template_group: str = "bootstrap.cluster.x-k8s.io"
    config_template_name: str = ""

    def spec(self) -> dict[str, Any]:
        if self.config_template_name:
            return {
                "configRef": {
                    "apiGroup": self.config_template_group,
                    "kind": self.config_template_kind,
                    "name": self.config_template_name,
                }
            }
        if not self.data_secret_name:
            raise ContractError("a node group needs a bootstrap Secret or a config template")
        return {"dataSecretName": self.data_secret_name}


@dataclass(frozen=True)
class NodeGroup:
    """What to render: one group of machines from one InstanceClass, in some zones."""

    name: str
    instance_class: dict[str, Any]  # the whole object (kind, metadata.name, spec)
    cluster: str  # the CAPI Cluster
    namespace: str
    bootstrap: Bootstrap
    #: ``None`` leaves ``spec.replicas`` out, so re-applying keeps what ``kubectl scale`` set.
    replicas: int | None = None
    zones: tuple[str, ...] = (DEFAULT_ZONE,)
    cluster_uuid: str = ""
    provider_values: dict[str, Any] = field(default_factory=dict)
    pod_subnet: str = ""
    #: Rolling update per zone (Deckhouse ``maxSurgePerZone``/``maxUnavailablePerZone``).
    max_surge: int = 1
    max_unavailable: int = 0


def short_hash(*parts: str) -> str:
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:8]


def machine_deployment_name(group: str, cluster_uuid: str, zone: str) -> str:
    return f"{group}-{short_hash(cluster_uuid, zone)}"


def render_node_group(
    group: NodeGroup, kinds: InfraKinds, templates: NodeTemplates, contract: Contract | None = None
) -> list[dict[str, Any]]:
    """For each zone: the InfraMachineTemplate, then the MachineDeployment (apply in order)."""
    kind = str(group.instance_class.get("kind") or "")
    if kind != templates.instance_class.kind:
        raise ContractError(
            f"{kind or 'the object'} is not a {templates.instance_class.kind} ({kinds.provider})"
        )
    contract = contract or Contract.parse(templates.contract_text())
    spec = dict(group.instance_class.get("spec") or {})
    class_name = str((group.instance_class.get("metadata") or {}).get("name") or "")
    objects: list[dict[str, Any]] = []
    for zone in group.zones or (DEFAULT_ZONE,):
        context = RenderContext(
            instance_class=spec,
            zone=zone,
            node_group=group.name,
            provider=group.provider_values,
            cluster_uuid=group.cluster_uuid,
            pod_subnet=group.pod_subnet,
        )
        template = contract.render(context)
        expected = (f"{kinds.template.group}/{kinds.template.version}", kinds.template.kind)
        if (template["apiVersion"], template["kind"]) != expected:
            raise ContractError(
                f"the template renders {template['apiVersion']} {template['kind']}, "
                f"not {expected[0]} {expected[1]}"
            )
        template_name = f"{group.name}-{contract.rollout_digest(spec, zone, group.cluster_uuid)}"
        labels = {NODE_GROUP_LABEL: group.name, CLUSTER_NAME_LABEL: group.cluster}
        metadata = {
            "name": template_name,
            "namespace": group.namespace,
            "labels": labels,
            "annotations": {
                INSTANCE_CLASS_ANNOTATION: class_name,
                APPLIED_INSTANCE_CLASS: json.dumps(spec, sort_keys=True, separators=(",", ":")),
            },
        }
        objects.append(
            {
                "apiVersion": template["apiVersion"],
                "kind": template["kind"],
                "metadata": metadata,
                "spec": template["spec"],
            }
        )
        objects.append(
            _machine_deployment(group, zone, kinds, template_name, contract, context, class_name)
        )
    return objects


def _machine_deployment(
    group: NodeGroup,
    zone: str,
    kinds: InfraKinds,
    template_name: str,
    contract: Contract,
    context: RenderContext,
    class_name: str,
) -> dict[str, Any]:
    name = machine_deployment_name(group.name, group.cluster_uuid, zone)
    selector = {NODE_GROUP_LABEL: group.name, DEPLOYMENT_NAME_LABEL: name}
    machine_spec: dict[str, Any] = {
        "clusterName": group.cluster,
        "bootstrap": group.bootstrap.spec(),
        "infrastructureRef": {
            "apiGroup": kinds.template.group,
            "kind": kinds.template.kind,
            "name": template_name,
        },
    }
    for path, value in contract.machine_deployment_fields(context).items():
        _set_path(machine_spec, path.split("."), value)
    return {
        "apiVersion": MACHINE_DEPLOYMENT_API_VERSION,
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": group.namespace,
            "labels": {NODE_GROUP_LABEL: group.name, CLUSTER_NAME_LABEL: group.cluster},
            "annotations": {INSTANCE_CLASS_ANNOTATION: class_name},
        },
        "spec": {
            "clusterName": group.cluster,
            **({"replicas": group.replicas} if group.replicas is not None else {}),
            "selector": {"matchLabels": selector},
            "rollout": {
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {
                        "maxSurge": group.max_surge,
                        "maxUnavailable": group.max_unavailable,
                    },
                }
            },
            "template": {"metadata": {"labels": dict(selector)}, "spec": machine_spec},
        },
    }


def _set_path(obj: dict[str, Any], path: list[str], value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value
