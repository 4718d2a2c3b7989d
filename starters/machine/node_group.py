"""NodeGroup reconciler: a ``cloudloop.io`` NodeGroup → its InfraMachineTemplates and a
MachineDeployment per zone, and the InstanceClasses' ``status.nodeGroupConsumers``.

Level-triggered like the InfraCluster one: Kubernetes objects only, never the cloud, no workflow.

Rules:
- Rendering is :func:`~cloudloop.nodegroup.render.render_node_group`, the code
  ``cloudloop nodegroup render`` prints with.
- A template whose name is missing is created; templates are immutable, a rollout field's change
  is a new name, and re-pointing the MachineDeployment rolls the machines as CAPI does.
- A zone's MachineDeployment is created at ``minPerZone`` or patched where its template, rollout
  strategy, labels, annotations or bounds differ; replicas are kept inside the bounds
  (:func:`~cloudloop.nodegroup.group.replicas`). One the group does not own is left alone
  (``Ready=False/OwnedElsewhere``). The MachineDeployment of a zone no longer listed is deleted.
- Nothing is decided before the stores it reads are listed (a class not yet listed is not gone).
- A missing InstanceClass or a render error is ``Ready=False`` with its reason, a Warning Event
  and a log line; nothing the group already has is deleted for it.
- Everything made is owned by the group, but Cluster API adds the Cluster as a second owner (the
  garbage collector would only drop ours): the finalizer ``cloudloop.io/node-group`` deletes the
  MachineDeployments and templates, and lets the group go once no MachineDeployment is left.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from typing import Any

from cloudloop.cloud.capi import InfraKinds, NodeTemplates
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import NodeGroupObject
from cloudloop.kube.conditions import set_condition
from cloudloop.kube.events import record_event
from cloudloop.kube.finalizers import add_finalizer, remove_finalizer
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import NODE_GROUPS, ObjectRef
from cloudloop.nodegroup import group as rules
from cloudloop.nodegroup.contract import Contract, ContractError
from cloudloop.nodegroup.render import NODE_GROUP_LABEL, render_node_group
from cloudloop.rules.machine import MACHINE_DEPLOYMENTS

log = logging.getLogger(__name__)

READY = "Ready"
FINALIZER = "cloudloop.io/node-group"
SYNC_TIMEOUT_S = 30.0


class NodeGroupReconciler:
    def __init__(
        self,
        kube: Kube,
        *,
        kinds: InfraKinds,
        templates: NodeTemplates,
        cluster: str,
        provider_values: Mapping[str, Any],
        node_groups: Informer[NodeGroupObject],
        instance_classes: Informer[dict[str, Any]],
        machine_deployments: Informer[dict[str, Any]],
    ) -> None:
        self.kube = kube
        self.kinds = kinds
        self.templates = templates
        self.cluster = cluster
        self.provider_values = dict(provider_values)
        self.node_groups = node_groups
        self.instance_classes = instance_classes
        self.machine_deployments = machine_deployments
        self.contract = Contract.parse(templates.contract_text())

    # -- keys ----------------------------------------------------------------------------------
    def groups_of_class(self, name: str) -> list[str]:
        """Keys of the groups naming the InstanceClass ``name`` (an InstanceClass event)."""
        kind = self.templates.instance_class.kind
        return [
            key
            for key, group in list(self.node_groups.store.items())
            if rules.class_reference(group) == (kind, name)
        ]

    # -- the group -----------------------------------------------------------------------------
    async def reconcile(self, key: str) -> bool:
        """Converge the group ``key``; True when it is Ready."""
        await self._synced(self.instance_classes, self.machine_deployments)
        group = self.node_groups.store.get(key)
        if group is None:
            return False
        if group["metadata"].get("deletionTimestamp"):
            await asyncio.to_thread(self._delete, group)
            return False
        if FINALIZER not in (group["metadata"].get("finalizers") or []):
            written = await asyncio.to_thread(
                add_finalizer, self.kube, ObjectRef.of(NODE_GROUPS, group), FINALIZER, group
            )
            if written is None:
                return False
            group = written
        kind, name = rules.class_reference(group)
        if kind != self.templates.instance_class.kind:
            return await self._refuse(
                group,
                rules.RENDER_FAILED,
                f"{kind} is not this cluster's InstanceClass kind "
                f"({self.templates.instance_class.kind})",
            )
        instance_class = self.instance_classes.store.get(name)
        if instance_class is None:
            return await self._refuse(
                group, rules.INSTANCE_CLASS_NOT_FOUND, f"{kind} {name} not found"
            )
        try:
            wanted = rules.to_render(
                group,
                {**instance_class, "kind": kind},
                cluster=self.cluster,
                provider_values=self.provider_values,
            )
            objects = render_node_group(wanted, self.kinds, self.templates, self.contract)
        except ContractError as exc:
            return await self._refuse(group, rules.RENDER_FAILED, str(exc))
        made = await asyncio.to_thread(self._apply, group, objects)
        if isinstance(made, str):
            return await self._refuse(group, rules.OWNED_ELSEWHERE, made)
        await asyncio.to_thread(
            self._write_status,
            group,
            True,
            rules.RENDERED,
            f"{len(made)} MachineDeployment(s) from {kind} {name}",
            made,
        )
        return True

    def _apply(self, group: NodeGroupObject, objects: list[dict[str, Any]]) -> list[str] | str:
        """Create the templates, create or patch the MachineDeployments, delete the ones of
        zones gone; their names, or why one cannot be written."""
        namespace = group["metadata"].get("namespace", "")
        owner = rules.owner_reference(group)
        where = f"NodeGroup {namespace}/{owner['name']}"
        low, high = rules.bounds(group)
        existing = {
            md["metadata"]["name"]: md
            for md in list(self.machine_deployments.store.values())
            if md["metadata"].get("namespace") == namespace
            and (md["metadata"].get("labels") or {}).get(NODE_GROUP_LABEL) == owner["name"]
        }
        wanted: list[dict[str, Any]] = [o for o in objects if o["kind"] == "MachineDeployment"]
        #: Each wanted MachineDeployment as the store has it (read once, before any write).
        stored = {
            md["metadata"]["name"]: self.machine_deployments.store.get(
                f"{namespace}/{md['metadata']['name']}"
            )
            for md in wanted
        }
        for name, current in stored.items():
            if current is not None and not rules.owned_by(current, group):
                return f"MachineDeployment {namespace}/{name} has another owner"
        for template in (o for o in objects if o["kind"] == self.kinds.template.kind):
            name = template["metadata"]["name"]
            if self.kube.get(self.kinds.template, name, namespace) is None:
                template["metadata"]["ownerReferences"] = [owner]
                self.kube.create(self.kinds.template, template, namespace)
                log.info("%s: template %s made", where, name)
        for md in wanted:
            name = md["metadata"]["name"]
            md["metadata"]["ownerReferences"] = [owner]
            md["metadata"]["annotations"].update(
                {rules.AUTOSCALER_MIN: str(low), rules.AUTOSCALER_MAX: str(high)}
            )
            current = stored[name]
            if current is None:
                md["spec"]["replicas"] = low
                try:
                    self.kube.create(MACHINE_DEPLOYMENTS, md, namespace)
                except KubeError as exc:
                    if exc.status != 409:
                        raise
                    continue  # made by the pass before; its watch event brings it here again
                log.info(
                    "NodeGroup %s/%s: MachineDeployment %s made", namespace, owner["name"], name
                )
                continue
            patch = _difference(current, md)
            count = rules.replicas((current.get("spec") or {}).get("replicas"), low, high)
            if count != (current.get("spec") or {}).get("replicas"):
                patch.setdefault("spec", {})["replicas"] = count
            if patch:
                self.kube.patch(MACHINE_DEPLOYMENTS, name, patch, namespace)
                log.info(
                    "NodeGroup %s/%s: MachineDeployment %s updated", namespace, owner["name"], name
                )
        names = {md["metadata"]["name"] for md in wanted}
        for name, md in existing.items():
            if name not in names and rules.owned_by(md, group):
                self.kube.delete(MACHINE_DEPLOYMENTS, name, namespace)
                log.info(
                    "NodeGroup %s/%s: MachineDeployment %s of a zone gone deleted",
                    namespace,
                    owner["name"],
                    name,
                )
        return sorted(names)

    def _delete(self, group: NodeGroupObject) -> None:
        """Delete what the group owns; drop its finalizer once no MachineDeployment is left."""
        meta = group["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        left = [
            md
            for md in list(self.machine_deployments.store.values())
            if md["metadata"].get("namespace") == namespace and rules.owned_by(md, group)
        ]
        for md in left:
            if not md["metadata"].get("deletionTimestamp"):
                self.kube.delete(MACHINE_DEPLOYMENTS, md["metadata"]["name"], namespace)
                log.info("NodeGroup %s/%s deleted: MachineDeployment %s deleted",
                         namespace, name, md["metadata"]["name"])  # fmt: skip
        if left:
            return  # each one's deletion event brings the group back here
        templates = self.kube.list(
            self.kinds.template, namespace, labelSelector=f"{NODE_GROUP_LABEL}={name}"
        )
        for template in templates.get("items", []):
            if rules.owned_by(template, group):
                self.kube.delete(self.kinds.template, template["metadata"]["name"], namespace)
        remove_finalizer(self.kube, ObjectRef.of(NODE_GROUPS, group), FINALIZER)
        log.info("NodeGroup %s/%s deleted: its machines are gone", namespace, name)

    async def _refuse(self, group: NodeGroupObject, reason: str, message: str) -> bool:
        ref = ObjectRef.of(NODE_GROUPS, group)
        await asyncio.to_thread(
            record_event, self.kube, ref, type="Warning", reason=reason, message=message
        )
        await asyncio.to_thread(self._write_status, group, False, reason, message, None)
        return False

    def _write_status(
        self,
        group: NodeGroupObject,
        ready: bool,
        reason: str,
        message: str,
        deployments: list[str] | None,
    ) -> None:
        meta = group["metadata"]
        status = group.get("status") or {}
        generation = int(meta.get("generation") or 1)
        conditions = set_condition(
            status.get("conditions"),
            type=READY,
            status=ready,
            reason=reason,
            message=message,
            observed_generation=generation,
        )
        body: dict[str, Any] = {"observedGeneration": generation, "conditions": conditions}
        if deployments is not None:
            body["machineDeployments"] = deployments
        if all(status.get(k) == v for k, v in body.items()):
            return
        self.kube.patch(
            NODE_GROUPS,
            meta["name"],
            {"metadata": {"uid": meta.get("uid", "")}, "status": body},
            meta.get("namespace", ""),
            subresource="status",
        )

    async def _synced(self, *informers: Informer[Any]) -> None:
        """Wait for the stores a decision reads: a class not yet listed is not a missing one."""
        for informer in informers:
            if not await informer.wait_synced(timeout=SYNC_TIMEOUT_S):
                raise TimeoutError(f"{informer.resource.kind} not listed yet")  # retried

    # -- the classes ---------------------------------------------------------------------------
    async def reconcile_class(self, name: str) -> None:
        """Write ``status.nodeGroupConsumers`` of the InstanceClass ``name`` if it differs."""
        await self._synced(self.node_groups)
        instance_class = self.instance_classes.store.get(name)
        if instance_class is None:
            return
        names = rules.consumers(
            list(self.node_groups.store.values()), self.templates.instance_class.kind, name
        )
        if list((instance_class.get("status") or {}).get("nodeGroupConsumers") or []) == names:
            return
        await asyncio.to_thread(
            self.kube.patch,
            self.templates.instance_class,
            name,
            {"status": {"nodeGroupConsumers": names}},
            subresource="status",
        )
        log.info("%s %s: node groups %s", self.templates.instance_class.kind, name, names)


def _difference(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch of what ``wanted`` sets that ``current`` lacks or holds otherwise: its
    labels, annotations, ownerReferences, and the spec's template and rollout strategy."""
    patch: dict[str, Any] = {}
    meta, wanted_meta = current.get("metadata") or {}, wanted["metadata"]
    for field in ("labels", "annotations"):
        have = meta.get(field) or {}
        changed = {k: v for k, v in wanted_meta[field].items() if have.get(k) != v}
        if changed:
            patch.setdefault("metadata", {})[field] = changed
    refs = list(meta.get("ownerReferences") or [])
    (ours,) = wanted_meta["ownerReferences"]
    if not any(r.get("uid") == ours["uid"] for r in refs):
        # Kept beside the others (Cluster API adds the Cluster's); a list is replaced whole.
        patch.setdefault("metadata", {})["ownerReferences"] = [*refs, ours]
    spec, wanted_spec = current.get("spec") or {}, wanted["spec"]
    if not _contains(spec.get("template") or {}, wanted_spec["template"]):
        template = copy.deepcopy(wanted_spec["template"])
        # A merge patch keeps keys it does not name: a bootstrap source switched (a Secret for a
        # config template) drops the old one with null.
        have = ((spec.get("template") or {}).get("spec") or {}).get("bootstrap") or {}
        bootstrap = template["spec"]["bootstrap"]
        bootstrap.update({k: None for k in have if k not in bootstrap})
        patch.setdefault("spec", {})["template"] = template
    if not _contains(spec.get("rollout") or {}, wanted_spec["rollout"]):
        patch.setdefault("spec", {})["rollout"] = wanted_spec["rollout"]
    return patch


def _contains(have: Any, want: Any) -> bool:
    """Whether ``have`` holds every field of ``want`` with its value (the server may add more:
    defaults, CAPI's own labels)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_contains(have.get(k), v) for k, v in want.items())
    return bool(have == want)
