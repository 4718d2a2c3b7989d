"""The ``Paused`` condition (CAPI v1beta2) both machine reconcilers report.

Written only when the object is paused or stops being so; otherwise the machine workflow writes
it with its first status (one write less on the way). A failed write is logged and left for the
next reconcile (the condition is a report, not a decision).
"""

from __future__ import annotations

import logging

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import InfraObject
from cloudloop.kube.conditions import get_condition, set_condition
from cloudloop.kube.resources import ObjectRef
from cloudloop.rules import machine as capi

log = logging.getLogger(__name__)


def paused_stale(obj: InfraObject, paused: bool) -> bool:
    """Whether :func:`report_paused` has anything to write (the reconcilers skip the thread hop
    otherwise: the common case, on a new machine's way to its workflow)."""
    current = get_condition(obj, capi.PAUSED)
    status = "True" if paused else "False"
    return not ((current or {}).get("status") == status or (current is None and not paused))


def report_paused(kube: Kube, ref: ObjectRef, obj: InfraObject, paused: bool) -> None:
    if not paused_stale(obj, paused):
        return
    status = "True" if paused else "False"
    conditions = set_condition(
        (obj.get("status") or {}).get("conditions"),
        type=capi.PAUSED,
        status=status,
        reason=capi.REASON_PAUSED if paused else capi.REASON_NOT_PAUSED,
        message="reconciliation is paused" if paused else "",
        observed_generation=int(obj["metadata"].get("generation") or 1),
    )
    try:
        kube.patch(
            ref.resource,
            ref.name,
            {"metadata": {"uid": ref.uid}, "status": {"conditions": conditions}},
            ref.namespace,
            subresource="status",
        )
    except KubeError as exc:
        log.warning("%s %s: Paused condition not written: %s", ref.kind, ref.key, exc)
