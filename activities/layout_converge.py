"""``layout.converge_report``: a converge pass's statuses, written where the cluster reads them.

One ConfigMap per cluster, ``d8-system/cloudloop-layout-converge`` (key ``status.json``): the
cluster's status, each module's (with its node group and node name, its to-create/change/replace
counts), the steps held for approval, the pass's start and the last start of a pass that could
read the cloud. The leader-elected starter exports it as terraform-state-exporter's metrics
(:mod:`starters.layout_converge`): gauges set by whichever worker ran a pass would disagree
across replicas.

Rules:
- A pass that could not plan (``error``, no modules) marks every module of the last report
  ``error`` and keeps the last success time: unknown is not ``ok``, and nothing is deleted.
- A node whose Terraform-state Secret is in ``d8-system`` (dhctl's, or written here) but which
  the layout no longer has is ``abandoned`` (terraform-state-exporter's "excess Node").
- After a pass that planned, the Terraform-state Secrets of what it found are written again
  (:func:`starters.layout.publish`: IDs and names only), so they stay current.
- The cluster's status changing records an Event on the ConfigMap (Warning unless ``ok``).
- Nothing secret is written: statuses, counts, keys, the diffs' values as plan shows them.
"""

from __future__ import annotations

import json

from temporalio import activity
from temporalio.exceptions import ApplicationError

from cloudloop.cloud.layouts import AdoptingPart
from cloudloop.cloud.registry import PROVIDERS
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.events import record_event
from cloudloop.kube.resources import CONFIG_MAPS, SECRETS, ObjectRef
from cloudloop.layouts import tfstate
from cloudloop.messages.layout import LayoutResult, ModuleResult, StepResult
from cloudloop.messages.layout_converge import (
    ConvergeActivity,
    ModuleStatus,
    ReportInput,
    ReportResult,
)
from cloudloop.rules.converge import worst
from starters.layout import ensure_namespace, publish
from starters.layout_converge import STATUS_CONFIG_MAP, STATUS_KEY, read_status

#: The Events' reporting component.
COMPONENT = "cloudloop-layout-converger"


class ConvergeActivities:
    def __init__(self, kube: Kube | None) -> None:
        self.kube = kube

    @activity.defn(name=ConvergeActivity.REPORT)
    def report(self, input: ReportInput) -> ReportResult:
        kube = self.kube
        if kube is None:
            raise ApplicationError(  # a worker without a cluster never gets one
                "this worker has no cluster to report into",
                type="KubeUnavailable",
                non_retryable=True,
            )
        try:
            return self._report(kube, input)
        except KubeError as exc:
            raise ApplicationError(
                f"writing the converge status: {exc}", type="KubeError"
            ) from None

    def _report(self, kube: Kube, input: ReportInput) -> ReportResult:
        namespace, name = STATUS_CONFIG_MAP
        ensure_namespace(kube, namespace)
        previous = read_status(kube) or {}
        result = input.result
        failed = result.status == "error"
        statuses = list(result.statuses)
        if failed and not statuses:
            statuses = [
                ModuleStatus(
                    module=str(m.get("module", "")),
                    status="error",
                    node_group=str(m.get("node_group", "")),
                    name=str(m.get("name", "")),
                    note=result.error[:300],
                )
                for m in previous.get("modules") or []
                if isinstance(m, dict) and m.get("status") != "abandoned"
            ] or [ModuleStatus(module="base", status="error", note=result.error[:300])]
        if not failed:
            statuses += self._abandoned(kube, set(input.nodes.values()))
        status = worst(s.status for s in statuses)
        document = {
            "cluster": input.cluster.prefix,
            "provider": input.provider,
            "status": status,
            "modules": [s.model_dump() for s in statuses],
            "held": [h.model_dump(mode="json") for h in result.held],
            "applied": result.applied,
            "error": result.error,
            "passStarted": input.started,
            "lastSuccess": previous.get("lastSuccess", "") if failed else input.started,
        }
        body = {
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "cloudloop"}},
            "data": {STATUS_KEY: json.dumps(document, sort_keys=True)},
        }
        found = kube.get(CONFIG_MAPS, name, namespace)
        if found is None:
            try:
                found = kube.create(CONFIG_MAPS, body, namespace)
            except KubeError as exc:
                if not exc.conflict:
                    raise
                found = kube.patch(CONFIG_MAPS, name, {"data": body["data"]}, namespace)
        else:
            found = kube.patch(CONFIG_MAPS, name, {"data": body["data"]}, namespace)
        written = [f"{namespace}/{name}"]
        before = str(previous.get("status", ""))
        if before != status:
            record_event(
                kube,
                ObjectRef.of(CONFIG_MAPS, found),
                type="Normal" if status == "ok" else "Warning",
                reason="ConvergeStatusChanged",
                message=f"layout {input.cluster.prefix}: {before or 'none'} -> {status}"
                + (f": {result.error}" if result.error else ""),
                component=COMPONENT,
            )
        if not failed and input.found:
            written += self._publish_states(kube, input)
        activity.logger.info("converge status of %s: %s", input.cluster.prefix, status)
        return ReportResult(written=written, previous=before)

    @staticmethod
    def _abandoned(kube: Kube, nodes: set[str]) -> list[ModuleStatus]:
        namespace, _ = tfstate.CLUSTER_STATE_SECRET
        listed = kube.list(SECRETS, namespace, labelSelector=tfstate.STATE_LABEL)
        out = []
        for secret in listed.get("items") or []:
            labels = (secret.get("metadata") or {}).get("labels") or {}
            node = labels.get(tfstate.NODE_NAME_LABEL, "")
            if node and node not in nodes:
                out.append(
                    ModuleStatus(
                        module=f"node/{node}",
                        status="abandoned",
                        node_group=labels.get(tfstate.NODE_GROUP_LABEL, ""),
                        name=node,
                        note="its Terraform state is in the cluster; the layout has no such node",
                    )
                )
        return out

    @staticmethod
    def _publish_states(kube: Kube, input: ReportInput) -> list[str]:
        record = PROVIDERS.get(input.provider)
        part = record.layouts() if record is not None and record.layouts is not None else None
        if not isinstance(part, AdoptingPart):
            return []
        modules = [
            ModuleResult(
                module=module,
                steps=[
                    StepResult(key=key, action="unchanged", outputs=outputs)
                    for key, outputs in resources.items()
                ],
                node_name=input.nodes.get(module, ""),
            )
            for module, resources in input.found.items()
            if resources
        ]
        result = LayoutResult(
            action="apply", layout="", prefix=input.cluster.prefix, modules=modules
        )
        return publish(kube, result, state_types=part.state_types)

    def all(self) -> list[object]:
        return [self.report]
