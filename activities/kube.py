"""Kubernetes activities: status patches with conditions, and Events."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.conditions import set_condition
from cloudloop.kube.events import record_event
from cloudloop.messages.kube import KubeActivity, PatchStatusInput, RecordEventInput


@contextlib.contextmanager
def kube_errors() -> Iterator[None]:
    """A 4xx other than conflict/throttling will not heal by retrying: fail the activity at once."""
    try:
        yield
    except KubeError as exc:
        retryable = exc.status >= 500 or exc.status in (409, 429) or exc.status == 0
        raise ApplicationError(
            str(exc), type=f"Kube{exc.reason or exc.status}", non_retryable=not retryable
        ) from exc


class KubeActivities:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @activity.defn(name=KubeActivity.PATCH_STATUS)
    def patch_status(self, input: PatchStatusInput) -> bool:
        """Merge-patch the status subresource; ``False`` if the object no longer exists."""
        with kube_errors():
            return self._patch_status(input)

    def _patch_status(self, input: PatchStatusInput) -> bool:
        ref = input.object
        current = self.kube.get(ref.resource, ref.name, ref.namespace or None)
        if current is None or (ref.uid and current["metadata"].get("uid") != ref.uid):
            activity.logger.info("%s %s is gone; status not written", ref.kind, ref.key)
            return False
        status: dict[str, Any] = dict(input.status)
        if input.observed_generation is not None:
            status["observedGeneration"] = input.observed_generation
        if input.condition is not None:
            c = input.condition
            status["conditions"] = set_condition(
                (current.get("status") or {}).get("conditions"),
                type=c.type,
                status=c.status,
                reason=c.reason,
                message=c.message,
                observed_generation=input.observed_generation,
            )
        self.kube.patch(
            ref.resource, ref.name, {"status": status}, ref.namespace or None, subresource="status"
        )
        return True

    @activity.defn(name=KubeActivity.RECORD_EVENT)
    def record_event(self, input: RecordEventInput) -> None:
        record_event(
            self.kube,
            input.object,
            type=input.type,
            reason=input.reason,
            message=input.message,
            component=input.component,
        )

    def all(self) -> list[object]:
        return [self.patch_status, self.record_event]
