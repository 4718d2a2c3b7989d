"""The shared instrumented-call wrapper: one count per call, one outcome vocabulary."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from cloudloop.cloud import errors
from cloudloop.cloud.calls import OUTCOMES, cloud_call, outcome_for


def _sample(operation: str, outcome: str) -> float:
    labels = {"provider": "unit", "operation": operation, "outcome": outcome}
    return REGISTRY.get_sample_value("cloud_api_requests_total", labels) or 0.0


def _translate(operation: str, exc: BaseException) -> errors.CloudError:
    if isinstance(exc, ConnectionError):
        return errors.CloudUnreachable("unit", operation, str(exc))
    if isinstance(exc, PermissionError):
        return errors.CloudAuthFailed("unit", operation, str(exc))
    if isinstance(exc, LookupError):
        return errors.NotFound("unit", operation, str(exc))
    return errors.CloudError("unit", operation, str(exc))


@pytest.mark.parametrize(
    ("raised", "kind", "outcome"),
    [
        pytest.param(ConnectionError("refused"), errors.CloudUnreachable, "unreachable", id="down"),
        pytest.param(PermissionError("denied"), errors.CloudAuthFailed, "auth_failed", id="auth"),
        pytest.param(LookupError("gone"), errors.NotFound, "not_found", id="gone"),
        pytest.param(RuntimeError("boom"), errors.CloudError, "error", id="other"),
        pytest.param(
            errors.InvalidRequest("unit", "Op", "bad"), errors.InvalidRequest, "invalid", id="own"
        ),
        pytest.param(
            errors.CloudThrottled("unit", "Op", "slow"),
            errors.CloudThrottled,
            "throttled",
            id="slow",
        ),
    ],
)
def test_a_failure_is_translated_and_counted_once(
    raised: Exception, kind: type[errors.CloudError], outcome: str
) -> None:
    operation = f"Op-{outcome}"
    before = {o: _sample(operation, o) for o in OUTCOMES}
    with pytest.raises(kind) as caught, cloud_call("unit", operation, _translate):
        raise raised
    assert caught.value.operation in (operation, "Op")
    after = {o: _sample(operation, o) - before[o] for o in OUTCOMES}
    assert after == {o: (1.0 if o == outcome else 0.0) for o in OUTCOMES}


def test_success_and_a_positive_empty_answer() -> None:
    before = _sample("Lookup", "success"), _sample("Lookup", "not_found")
    with cloud_call("unit", "Lookup", _translate):
        pass
    with cloud_call("unit", "Lookup", _translate) as call:
        call.found = False
    assert (_sample("Lookup", "success"), _sample("Lookup", "not_found")) == (
        before[0] + 1,
        before[1] + 1,
    )


def test_every_error_kind_has_an_outcome_in_the_vocabulary() -> None:
    for kind in errors.KINDS.values():
        assert outcome_for(kind) in OUTCOMES
