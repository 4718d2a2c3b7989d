"""Status conditions as Kubernetes API conventions define them (pure functions on dicts)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any


def now_rfc3339() -> str:
    return (
        datetime.datetime.now(datetime.UTC)
        .replace(microsecond=0)
        .isoformat()
        .replace("+00:00", "Z")
    )


def set_condition(
    conditions: Iterable[Mapping[str, Any]] | None,
    *,
    type: str,
    status: bool | str,
    reason: str,
    message: str,
    observed_generation: int | None = None,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """``conditions`` with ``type`` set; ``lastTransitionTime`` moves only when status changes."""
    status_text = status if isinstance(status, str) else ("True" if status else "False")
    result = [dict(c) for c in conditions or []]
    current = next((c for c in result if c.get("type") == type), None)
    if current is None:
        current = {"type": type}
        result.append(current)
    if current.get("status") != status_text or "lastTransitionTime" not in current:
        current["lastTransitionTime"] = now or now_rfc3339()
    current.update(status=status_text, reason=reason, message=message)
    if observed_generation is not None:
        current["observedGeneration"] = observed_generation
    return result


def get_condition(obj: Mapping[str, Any], type: str) -> dict[str, Any] | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type), None)
