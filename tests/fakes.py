"""An in-memory stand-in for :class:`~cloudloop.kube.api.Kube`: get, list, create, merge patch.

Enough for loops that create-or-update a few objects; ``fail_next`` makes the next writes fail
the way an API server does, and ``writes`` records every successful write.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cloudloop.kube.api import Kube, KubeError, PatchType
from cloudloop.kube.bodies import BodyT, ObjectList
from cloudloop.kube.resources import Resource

Key = tuple[str, str, str]  # plural, namespace, name


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch."""
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


class MemoryKube(Kube):
    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.writes: list[tuple[str, Key, Any]] = []
        self.fail_next = 0
        self.fail_reads = False

    @staticmethod
    def key(resource: Resource[Any], name: str, namespace: str | None) -> Key:
        return (resource.plural, (namespace or "") if resource.namespaced else "", name)

    def _maybe_fail(self) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise KubeError(500, "Internal Server Error", {"message": "scripted failure"})

    def get(
        self, resource: Resource[BodyT], name: str, namespace: str | None = None
    ) -> BodyT | None:
        if self.fail_reads:
            raise KubeError(503, "Service Unavailable", {"message": "scripted read failure"})
        found = self.objects.get(self.key(resource, name, namespace))
        return resource.body(copy.deepcopy(found)) if found is not None else None

    def list(
        self, resource: Resource[BodyT], namespace: str | None = None, **query: Any
    ) -> ObjectList[BodyT]:
        if self.fail_reads:
            raise KubeError(503, "Service Unavailable", {"message": "scripted read failure"})
        items = [
            copy.deepcopy(obj)
            for (plural, ns, _), obj in self.objects.items()
            if plural == resource.plural and (namespace is None or ns == namespace)
        ]
        return resource.page({"items": items})

    def create(
        self, resource: Resource[BodyT], obj: Mapping[str, Any], namespace: str | None = None
    ) -> BodyT:
        self._maybe_fail()
        key = self.key(resource, obj["metadata"]["name"], namespace)
        if key in self.objects:
            raise KubeError(409, "Conflict", {"reason": "AlreadyExists"})
        self.objects[key] = copy.deepcopy(dict(obj))
        self.writes.append(("create", key, obj))
        return resource.body(copy.deepcopy(obj))

    def patch(
        self,
        resource: Resource[BodyT],
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        patch_type: PatchType = "merge",
    ) -> BodyT:
        self._maybe_fail()
        key = self.key(resource, name, namespace)
        if key not in self.objects:
            raise KubeError(404, "Not Found", {"reason": "NotFound"})
        self.objects[key] = merge(self.objects[key], patch)
        self.writes.append(("patch", key, patch))
        return resource.body(copy.deepcopy(self.objects[key]))

    def put(
        self, resource: Resource[Any], obj: Mapping[str, Any], namespace: str | None = None
    ) -> None:
        """Seed an object (any body, typed or not) without recording a write."""
        key = self.key(resource, obj["metadata"]["name"], namespace)
        self.objects[key] = copy.deepcopy(dict(obj))
