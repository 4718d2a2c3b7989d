"""A ``cloudloop.io`` NodeGroup read as what to render, and what its objects must hold.

The node-group reconciler (``starters/machine/node_group.py``) turns each NodeGroup into the
objects ``cloudloop nodegroup render`` prints, with the pure decisions here.

Rules (Deckhouse's node manager, ``cloudInstances``):
- The group's spec becomes one :class:`~cloudloop.nodegroup.render.NodeGroup`; the names mix in
  the cluster's name where Deckhouse mixes its cluster UUID, so they stay stable per cluster.
- Replicas per zone stay inside ``[minPerZone, maxPerZone]``: a new MachineDeployment starts at
  ``minPerZone``; a ``kubectl scale`` (or the autoscaler) inside the range is kept, one outside is
  brought to the nearer bound. The bounds are also the Cluster API autoscaler's annotations.
- Every object made carries one controller ownerReference to the group (the garbage collector
  deletes them with it); an object some other controller owns is never taken over.
- ``status.nodeGroupConsumers`` of a class is the sorted names of the groups naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cloudloop.kube.bodies import NodeGroupObject, OwnerReference
from cloudloop.kube.resources import NODE_GROUPS
from cloudloop.nodegroup.contract import ContractError
from cloudloop.nodegroup.render import DEFAULT_ZONE, Bootstrap, NodeGroup

AUTOSCALER_MIN = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
AUTOSCALER_MAX = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"

#: Ready's reasons.
RENDERED = "Rendered"
INSTANCE_CLASS_NOT_FOUND = "InstanceClassNotFound"
RENDER_FAILED = "RenderFailed"
OWNED_ELSEWHERE = "OwnedElsewhere"


def class_reference(group: NodeGroupObject) -> tuple[str, str]:
    """(kind, name) of the InstanceClass the group names."""
    ref = (group.get("spec") or {}).get("cloudInstances", {}).get("classReference") or {}
    return str(ref.get("kind") or ""), str(ref.get("name") or "")


def bounds(group: NodeGroupObject) -> tuple[int, int]:
    """(minPerZone, maxPerZone)."""
    instances = (group.get("spec") or {}).get("cloudInstances") or {}
    low = int(instances.get("minPerZone") or 0)
    return low, max(low, int(instances.get("maxPerZone") or 0))


def to_render(
    group: NodeGroupObject,
    instance_class: Mapping[str, Any],
    *,
    cluster: str,
    provider_values: Mapping[str, Any],
) -> NodeGroup:
    """What :func:`~cloudloop.nodegroup.render.render_node_group` renders for ``group``
    (replicas left out: the reconciler sets them)."""
    meta, spec = group["metadata"], group.get("spec") or {}
    instances = spec.get("cloudInstances") or {}
    bootstrap = spec.get("bootstrap") or {}
    surge = int(instances.get("maxSurgePerZone", 1))
    unavailable = int(instances.get("maxUnavailablePerZone", 0))
    if surge == 0 and unavailable == 0:
        raise ContractError("maxSurgePerZone and maxUnavailablePerZone cannot both be 0")
    return NodeGroup(
        name=meta["name"],
        instance_class=dict(instance_class),
        cluster=str(spec.get("clusterName") or ""),
        namespace=meta.get("namespace", ""),
        bootstrap=Bootstrap(
            data_secret_name=str(bootstrap.get("dataSecretName") or ""),
            config_template_name=str(bootstrap.get("configTemplateName") or ""),
        ),
        zones=tuple(instances.get("zones") or ()) or (DEFAULT_ZONE,),
        cluster_uuid=cluster,
        provider_values=dict(provider_values),
        pod_subnet=str(spec.get("podSubnet") or ""),
        max_surge=surge,
        max_unavailable=unavailable,
    )


def replicas(current: int | None, low: int, high: int) -> int:
    """The replicas a zone's MachineDeployment must have: ``current`` if inside the bounds."""
    if current is None:
        return low
    return min(max(current, low), high)


def owner_reference(group: NodeGroupObject) -> OwnerReference:
    return {
        "apiVersion": NODE_GROUPS.api_version,
        "kind": NODE_GROUPS.kind,
        "name": group["metadata"]["name"],
        "uid": group["metadata"].get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: Mapping[str, Any]) -> OwnerReference | None:
    """The ownerReference marked ``controller`` of ``obj``, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def owned_by(obj: Mapping[str, Any], group: NodeGroupObject) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == group["metadata"].get("uid")


def consumers(groups: Iterable[NodeGroupObject], kind: str, name: str) -> list[str]:
    """The sorted names of the groups that name the InstanceClass ``kind``/``name``."""
    return sorted({g["metadata"]["name"] for g in groups if class_reference(g) == (kind, name)})
