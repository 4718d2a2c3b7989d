"""Node drain activities of the termination handler: taint, cordon, pods to evict, evictions
through the Eviction API, VolumeAttachments, the webhook, and the ASG lifecycle calls.

Evictions never happen twice for one pod, even when a worker dies mid-round and the activity runs
again: every attempt starts from a fresh list of the node's pods, skips pods that are gone (UID
changed or 404) or already terminating, and sends the eviction with a UID precondition. A PDB's
refusal (429) is retried after ``retry_interval_s``, or as soon as the PDB's status allows a
disruption again; each refusal is counted and the first in a round becomes a Warning Event on
the Node.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import webhook
from activities.cloud import cloud_errors
from activities.heartbeats import heartbeating
from activities.kube import kube_errors
from cloudloop.cloud.errors import NotSupported
from cloudloop.cloud.termination import TerminationClient
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import (
    DeleteOptions,
    Eviction,
    LabelSelector,
    Node,
    OwnerReference,
    Pod,
    Taint,
)
from cloudloop.kube.events import record_event
from cloudloop.kube.resources import NODES, PDBS, PODS, VOLUME_ATTACHMENTS, ObjectRef
from cloudloop.messages.errors import ErrorKind
from cloudloop.messages.kube import EventSource
from cloudloop.messages.termination import (
    CordonNodeInput,
    DrainActivity,
    EvictPodsInput,
    EvictPodsResult,
    LifecycleActionInput,
    ListPodsInput,
    OutcomeInput,
    PodNote,
    PodPlan,
    PodRef,
    QueueInfo,
    QueueRulesInput,
    QueueSpec,
    TaintNodeInput,
    WaitVolumeAttachmentsInput,
    WebhookInput,
)
from cloudloop.metrics import NTH_ACTIONS, NTH_DRAIN_BLOCKED_PODS, NTH_EVICTIONS
from cloudloop.settings import NthSettings

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CONFLICT_RETRIES = 10
#: The shortest pause between two pod (or VolumeAttachment) lists of one drain.
MIN_POLL_S = 1.0
#: The eviction answer when several PDBs cover one pod: a misconfiguration, not a wait.
MULTIPLE_PDBS = "more than one PodDisruptionBudget"


def node_ref(name: str) -> ObjectRef:
    return ObjectRef(plural=NODES.plural, kind=NODES.kind, name=name)


def selector_matches(selector: LabelSelector | None, labels: dict[str, str]) -> bool:
    """A PDB's label selector against a pod's labels (``None`` matches nothing, ``{}`` all)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), expression.get("operator", "")
        values = expression.get("values") or []
        if operator == "In" and (key not in labels or labels[key] not in values):
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def controller_of(pod: Pod) -> OwnerReference | None:
    for owner in pod["metadata"].get("ownerReferences") or []:
        if owner.get("controller"):
            return owner.copy()
    return None


def classify_pods(pods: list[Pod], input: ListPodsInput) -> PodPlan:
    """kubectl drain's filters: mirror and DaemonSet pods, emptyDir, pods without controller."""
    plan = PodPlan()
    for pod in pods:
        meta = pod["metadata"]
        ref = PodRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
        finished = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
        controller = controller_of(pod)
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            plan.skipped.append(PodNote(pod=ref, reason="mirror pod"))
        elif controller is not None and controller.get("kind") == "DaemonSet":
            note = PodNote(pod=ref, reason="DaemonSet-managed")
            (plan.skipped if input.ignore_daemonsets else plan.refused).append(note)
        elif (
            not finished
            and not input.delete_emptydir_data
            and any("emptyDir" in v for v in pod.get("spec", {}).get("volumes") or [])
        ):
            plan.refused.append(PodNote(pod=ref, reason="has local storage (emptyDir)"))
        elif not finished and controller is None and not input.force:
            plan.refused.append(PodNote(pod=ref, reason="not managed by a controller"))
        else:
            plan.evict.append(ref)
    return plan


@dataclass
class _Pending:
    """One pod of an eviction round."""

    ref: PodRef
    next_try: float = 0.0
    evicted: bool = False
    blocked: str = ""


def _evicted_before() -> list[str]:
    """Pod UIDs an earlier attempt of this round heartbeated as evicted (none on the first)."""
    details = activity.info().heartbeat_details
    last = details[-1] if details else None
    uids = last.get("evicted") if isinstance(last, Mapping) else None
    return [uid for uid in uids if isinstance(uid, str)] if isinstance(uids, list) else []


class DrainActivities:
    def __init__(self, kube: Kube, aws: TerminationClient | None, nth: NthSettings) -> None:
        self.kube = kube
        self.aws = aws
        self.nth = nth

    # -- node ------------------------------------------------------------------------------
    @activity.defn(name=DrainActivity.TAINT_NODE)
    def taint_node(self, input: TaintNodeInput) -> bool:
        """Add the taints (replacing one with the same key and effect); ``False``: no Node."""
        with kube_errors():
            for _ in range(CONFLICT_RETRIES):
                node = self.kube.get(NODES, input.node)
                if node is None:
                    return False
                current: list[Taint] = list(node.get("spec", {}).get("taints") or [])
                # One taint per key and effect (the API refuses duplicates): two events of one
                # kind (the IMDS and the queue copy of a Spot notice) share it, the last wins.
                by_key = {
                    (t.key, t.effect): Taint(key=t.key, value=t.value, effect=t.effect)
                    for t in input.taints
                }
                wanted = list(by_key.values())
                kept = [
                    t
                    for t in current
                    if not any(
                        t.get("key") == w["key"] and t.get("effect") == w["effect"] for w in wanted
                    )
                ]
                taints = kept + wanted
                if sorted(map(str, taints)) == sorted(map(str, current)):
                    return True
                # A merge patch of a Node is a partial Node: the taints as a whole, guarded by
                # the version they were read at.
                patch: Node = {
                    "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                    "spec": {"taints": taints},
                }
                try:
                    self.kube.patch(NODES, input.node, patch)
                    return True
                except KubeError as exc:
                    if not exc.conflict:
                        raise
            raise ApplicationError(
                f"node {input.node}: taints kept conflicting", type=ErrorKind.CONFLICT
            )

    @activity.defn(name=DrainActivity.CORDON_NODE)
    def cordon_node(self, input: CordonNodeInput) -> bool:
        """``spec.unschedulable=true``; ``False`` when the Node is gone."""
        with kube_errors():
            try:
                cordon: Node = {"spec": {"unschedulable": True}}
                self.kube.patch(NODES, input.node, cordon)
            except KubeError as exc:
                if exc.not_found:
                    return False
                raise
            return True

    # -- pods ------------------------------------------------------------------------------
    def _node_pods(self, node: str) -> list[Pod]:
        return self.kube.list(PODS, fieldSelector=f"spec.nodeName={node}")["items"]

    @activity.defn(name=DrainActivity.LIST_PODS)
    def list_pods(self, input: ListPodsInput) -> PodPlan:
        with kube_errors():
            return classify_pods(self._node_pods(input.node), input)

    def _evict(self, ref: PodRef, grace_period_s: int | None) -> tuple[str, str]:
        """One eviction request: (``evicted``|``gone``|``blocked``|``retry``|``failed``, why)."""
        delete_options: DeleteOptions = {"preconditions": {"uid": ref.uid}}
        if grace_period_s is not None:
            delete_options["gracePeriodSeconds"] = grace_period_s
        body: Eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": ref.name, "namespace": ref.namespace},
            "deleteOptions": delete_options,
        }
        try:
            self.kube.request("POST", PODS.path(ref.namespace, ref.name, "eviction"), body=body)
        except KubeError as exc:
            message = str(exc.body.get("message") or exc)
            if exc.status == 404:
                return "gone", message
            if exc.status == 409:  # UID precondition: a different pod has this name now
                current = self.kube.get(PODS, ref.name, ref.namespace)
                if current is None or current["metadata"].get("uid") != ref.uid:
                    return "gone", message
                return "retry", message
            if exc.status == 429:
                return "blocked", message
            if exc.status == 403 and "terminat" in message.lower():
                return "retry", message  # NamespaceTerminating: the namespace deletes it
            if exc.status >= 500 and MULTIPLE_PDBS not in message:
                return "retry", message
            return "failed", message
        return "evicted", ""

    def _allowed_now(self, blocked: list[_Pending], pods: dict[str, Pod]) -> set[str]:
        """Blocked pods whose every PDB allows a disruption now (within the allowed count)."""
        budgets: dict[tuple[str, str], int] = {}
        selectors: dict[str, list[tuple[str, LabelSelector | None]]] = {}
        for namespace in {p.ref.namespace for p in blocked}:
            selectors[namespace] = []
            for pdb in self.kube.list(PDBS, namespace)["items"]:
                name = pdb["metadata"]["name"]
                budgets[namespace, name] = int(
                    (pdb.get("status") or {}).get("disruptionsAllowed") or 0
                )
                selectors[namespace].append((name, pdb.get("spec", {}).get("selector")))
        ready: set[str] = set()
        for pending in sorted(blocked, key=lambda p: p.next_try):
            labels = pods[pending.ref.uid]["metadata"].get("labels") or {}
            covering = [
                (pending.ref.namespace, name)
                for name, selector in selectors[pending.ref.namespace]
                if selector_matches(selector, labels)
            ]
            if covering and all(budgets[key] > 0 for key in covering):
                ready.add(pending.ref.uid)
                for key in covering:
                    budgets[key] -= 1
        return ready

    @activity.defn(name=DrainActivity.EVICT_PODS)
    def evict_pods(self, input: EvictPodsInput) -> EvictPodsResult:
        """One round: evict, retry refusals, wait for deletion (pod gone or UID changed)."""
        with kube_errors():
            return self._evict_round(input)

    def _evict_round(self, input: EvictPodsInput) -> EvictPodsResult:
        started = time.monotonic()
        left_s = (input.deadline - datetime.now(UTC)).total_seconds()
        end = started + max(0.0, min(input.round_s, left_s))
        pending = {ref.uid: _Pending(ref) for ref in input.pods}
        result = EvictPodsResult()
        for uid in _evicted_before():  # a retried round still counts the earlier attempt's
            if uid in pending and not pending[uid].evicted:
                pending[uid].evicted = True
                result.evicted.append(pending[uid].ref)
        warned = False
        blocked_gauge = NTH_DRAIN_BLOCKED_PODS.labels(input.node)
        while True:
            live = {p["metadata"]["uid"]: p for p in self._node_pods(input.node)}
            for uid in [uid for uid in pending if uid not in live]:
                del pending[uid]  # deleted, or replaced by a pod with another UID
            now = time.monotonic()
            if not pending or now >= end:
                break
            waiting = [
                p
                for p in pending.values()
                if p.blocked
                and not p.evicted
                and now < p.next_try
                and not live[p.ref.uid]["metadata"].get("deletionTimestamp")
            ]
            early = self._allowed_now(waiting, live) if waiting else set()
            for item in pending.values():
                pod = live[item.ref.uid]
                if item.evicted or pod["metadata"].get("deletionTimestamp"):
                    continue  # terminating: wait for it to go
                if now < item.next_try and item.ref.uid not in early:
                    continue
                outcome, why = self._evict(item.ref, input.grace_period_s)
                NTH_EVICTIONS.labels(outcome if outcome != "retry" else "error").inc()
                if outcome == "evicted":
                    item.evicted, item.blocked = True, ""
                    result.evicted.append(item.ref)
                    activity.logger.info("evicted pod %s from %s", item.ref.key, input.node)
                elif outcome in ("blocked", "retry"):
                    item.blocked = why if outcome == "blocked" else item.blocked
                    item.next_try = time.monotonic() + input.retry_interval_s
                elif outcome == "failed":
                    result.failed.append(PodNote(pod=item.ref, reason=why))
            blocked = [p for p in pending.values() if p.blocked and not p.evicted]
            blocked_gauge.set(len(blocked))
            if blocked and not warned:
                warned = True
                example = blocked[0]
                record_event(
                    self.kube,
                    node_ref(input.node),
                    type="Warning",
                    reason="EvictionBlocked",
                    message=(
                        f"{len(blocked)} pod(s) cannot be evicted yet, e.g. "
                        f"{example.ref.key}: {example.blocked}; retrying until the drain "
                        f"deadline {input.deadline.isoformat()} (workflow {input.workflow_id})"
                    ),
                    component=EventSource.TERMINATION,
                )
            activity.heartbeat({"evicted": [r.uid for r in result.evicted]})
            if result.failed:
                break
            poll = max(MIN_POLL_S, input.poll_interval_s)  # runs started with 0.25 s too
            time.sleep(max(0.0, min(poll, end - time.monotonic())))
        result.remaining = [p.ref for p in pending.values()]
        result.blocked = [
            PodNote(pod=p.ref, reason=p.blocked)
            for p in pending.values()
            if p.blocked and not p.evicted
        ]
        blocked_gauge.set(len(result.blocked))
        return result

    @activity.defn(name=DrainActivity.WAIT_VOLUME_ATTACHMENTS)
    def wait_volume_attachments(self, input: WaitVolumeAttachmentsInput) -> list[str]:
        """Wait until no VolumeAttachment names the node; the ones left at the timeout."""
        with kube_errors():
            deadline = time.monotonic() + input.timeout_s
            while True:
                names = [
                    va["metadata"]["name"]
                    for va in self.kube.list(VOLUME_ATTACHMENTS)["items"]
                    if va.get("spec", {}).get("nodeName") == input.node
                ]
                if not names or time.monotonic() >= deadline:
                    return names
                activity.heartbeat(len(names))
                time.sleep(max(MIN_POLL_S, input.poll_interval_s))

    # -- reporting -------------------------------------------------------------------------
    @activity.defn(name=DrainActivity.SEND_WEBHOOK)
    def send_webhook(self, input: WebhookInput) -> bool:
        """POST the templated notification once; errors and non-2xx are logged only."""
        if self.nth.webhook_url is None:
            return False
        template = (
            self.nth.webhook_template_file.read_text()
            if self.nth.webhook_template_file is not None
            else self.nth.webhook_template
        )
        try:
            headers = webhook.parse_headers(self.nth.webhook_headers.get_secret_value())
        except ValueError as exc:
            activity.logger.warning("webhook headers are not a JSON object: %s", exc)
            return False
        status = webhook.send(self.nth.webhook_url.get_secret_value(), headers, template, input)
        return status is not None and 200 <= status < 300

    @activity.defn(name=DrainActivity.RECORD_OUTCOME)
    def record_outcome(self, input: OutcomeInput) -> None:
        NTH_ACTIONS.labels(input.action, "success" if input.ok else "error").inc()
        if input.ok:  # nothing of this node is blocked any more
            with contextlib.suppress(KeyError):
                NTH_DRAIN_BLOCKED_PODS.remove(input.node)
        record_event(
            self.kube,
            node_ref(input.node),
            type="Normal" if input.ok else "Warning",
            reason=input.reason,
            message=input.message,
            component=EventSource.TERMINATION,
        )

    # -- Auto Scaling ----------------------------------------------------------------------
    def _cloud(self) -> TerminationClient:
        if self.aws is None:
            raise NotSupported("none", "termination")
        return self.aws

    @activity.defn(name=DrainActivity.COMPLETE_LIFECYCLE_ACTION)
    def complete_lifecycle_action(self, input: LifecycleActionInput) -> bool:
        """``False`` when AWS no longer knows the action (completed before, or expired)."""
        with cloud_errors():
            return self._cloud().complete_lifecycle_action(input.action, input.result)

    @activity.defn(name=DrainActivity.RECORD_LIFECYCLE_HEARTBEAT)
    def record_lifecycle_heartbeat(self, input: LifecycleActionInput) -> bool:
        with cloud_errors():
            return self._cloud().record_lifecycle_heartbeat(input.action)

    # -- the queue's infrastructure ------------------------------------------------------------
    @activity.defn(name=DrainActivity.ENSURE_QUEUE)
    def ensure_queue(self, input: QueueSpec) -> QueueInfo:
        with heartbeating(), cloud_errors():
            return self._cloud().ensure_queue(input)

    @activity.defn(name=DrainActivity.ENSURE_QUEUE_RULES)
    def ensure_queue_rules(self, input: QueueRulesInput) -> list[str]:
        with heartbeating(), cloud_errors():
            return self._cloud().ensure_rules(input.spec, input.queue)

    @activity.defn(name=DrainActivity.ENSURE_LIFECYCLE_HOOKS)
    def ensure_lifecycle_hooks(self, input: QueueSpec) -> list[str]:
        with heartbeating(), cloud_errors():
            return self._cloud().ensure_lifecycle_hooks(input)

    @activity.defn(name=DrainActivity.REMOVE_QUEUE)
    def remove_queue(self, input: QueueSpec) -> list[str]:
        with heartbeating(), cloud_errors():
            return self._cloud().remove_queue(input)

    def all(self) -> list[object]:
        return [
            self.ensure_queue,
            self.ensure_queue_rules,
            self.ensure_lifecycle_hooks,
            self.remove_queue,
            self.taint_node,
            self.cordon_node,
            self.list_pods,
            self.evict_pods,
            self.wait_volume_attachments,
            self.send_webhook,
            self.record_outcome,
            self.complete_lifecycle_action,
            self.record_lifecycle_heartbeat,
        ]
