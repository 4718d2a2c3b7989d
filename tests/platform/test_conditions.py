"""Status conditions follow the API conventions: transition time moves only on status change."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.kube.conditions import get_condition, set_condition

OLD = "2026-01-01T00:00:00Z"
NOW = "2026-02-02T00:00:00Z"


@pytest.mark.parametrize(
    ("existing", "status", "expected_time"),
    [
        pytest.param([], True, NOW, id="new-condition"),
        pytest.param(
            [{"type": "Ready", "status": "True", "lastTransitionTime": OLD}],
            True,
            OLD,
            id="same-status-keeps-time",
        ),
        pytest.param(
            [{"type": "Ready", "status": "True", "lastTransitionTime": OLD}],
            False,
            NOW,
            id="flip-moves-time",
        ),
        pytest.param([{"type": "Ready", "status": "Unknown"}], True, NOW, id="missing-time"),
    ],
)
def test_set_condition_transition_time(
    existing: list[dict[str, Any]], status: bool, expected_time: str
) -> None:
    result = set_condition(existing, type="Ready", status=status, reason="R", message="m", now=NOW)
    (ready,) = result
    assert ready["lastTransitionTime"] == expected_time
    assert ready["status"] == ("True" if status else "False")


def test_set_condition_keeps_other_types_and_input() -> None:
    existing = [{"type": "Other", "status": "True"}]
    result = set_condition(
        existing,
        type="Ready",
        status=False,
        reason="Down",
        message="x",
        observed_generation=3,
        now=NOW,
    )
    assert [c["type"] for c in result] == ["Other", "Ready"]
    assert result[1]["observedGeneration"] == 3
    assert existing == [{"type": "Other", "status": "True"}]


@pytest.mark.parametrize(
    ("obj", "found"),
    [
        pytest.param({}, False, id="no-status"),
        pytest.param({"status": {"conditions": None}}, False, id="null-conditions"),
        pytest.param({"status": {"conditions": [{"type": "Ready"}]}}, True, id="present"),
    ],
)
def test_get_condition(obj: dict[str, Any], found: bool) -> None:
    assert (get_condition(obj, "Ready") is not None) is found
