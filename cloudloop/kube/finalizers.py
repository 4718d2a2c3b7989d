"""Adding and removing one finalizer safely: merge patches guarded by resourceVersion and UID.

Each patch replaces ``metadata.finalizers`` as read, with the read ``resourceVersion`` as an
optimistic lock (409 on a concurrent write, then re-read and retry) and the UID as a guard, so a
finalizer never lands on a recreated object of the same name and no other finalizer is lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import BodyT
from cloudloop.kube.resources import ObjectRef

CONFLICT_RETRIES = 10


def replaced(exc: KubeError) -> bool:
    """The patch named a UID the object no longer has: it was deleted and recreated."""
    return exc.status == 422 and "metadata.uid" in str(exc)


def _patch_finalizers(
    kube: Kube, ref: ObjectRef, obj: Mapping[str, Any], finalizers: list[str]
) -> Mapping[str, Any]:
    meta = obj["metadata"]
    patch = {
        "metadata": {
            "finalizers": finalizers or None,
            "resourceVersion": meta["resourceVersion"],
            "uid": meta["uid"],
        }
    }
    return kube.patch(ref.resource, ref.name, patch, ref.namespace or None)


def _fresh(kube: Kube, ref: ObjectRef) -> Mapping[str, Any] | None:
    obj = kube.get(ref.resource, ref.name, ref.namespace or None)
    if obj is None or (ref.uid and obj["metadata"].get("uid") != ref.uid):
        return None
    return obj


def add_finalizer(
    kube: Kube, ref: ObjectRef, finalizer: str, obj: BodyT | None = None
) -> BodyT | None:
    """Add ``finalizer`` (starting from ``obj``, e.g. an informer's copy); the object as written
    (typed as ``obj``), or None when it is gone. An object already being deleted cannot take new
    finalizers."""
    current: Mapping[str, Any] | None = obj if obj is not None else _fresh(kube, ref)
    for _ in range(CONFLICT_RETRIES):
        if current is None:
            return None
        meta = current["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if finalizer in finalizers or meta.get("deletionTimestamp"):
            return cast(BodyT, current)
        try:
            return cast(BodyT, _patch_finalizers(kube, ref, current, [*finalizers, finalizer]))
        except KubeError as exc:
            if exc.not_found or replaced(exc):
                return None
            if not exc.conflict:
                raise
        current = _fresh(kube, ref)
    raise KubeError(409, "Conflict", {"message": f"{ref.key}: finalizer kept conflicting"})


def remove_finalizer(kube: Kube, ref: ObjectRef, finalizer: str) -> bool:
    """Remove ``finalizer``; False when the object (with this UID) is gone already."""
    for _ in range(CONFLICT_RETRIES):
        current = _fresh(kube, ref)
        if current is None:
            return False
        finalizers = list(current["metadata"].get("finalizers") or [])
        if finalizer not in finalizers:
            return True
        try:
            _patch_finalizers(kube, ref, current, [f for f in finalizers if f != finalizer])
            return True
        except KubeError as exc:
            if exc.not_found or replaced(exc):
                return False
            if not exc.conflict:
                raise
    raise KubeError(409, "Conflict", {"message": f"{ref.key}: finalizer kept conflicting"})
