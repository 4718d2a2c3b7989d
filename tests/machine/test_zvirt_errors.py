"""``ovirtsdk4`` failures become the contract's error classes; auth is never "not found"."""

from __future__ import annotations

import ovirtsdk4 as sdk
import pytest
from prometheus_client import REGISTRY

from cloudloop.cloud import errors
from cloudloop.cloud.zvirt.driver import ZvirtBase, translate
from cloudloop.cloud.zvirt.settings import ZvirtSettings


def coded(code: int, message: str = 'Fault reason is "Operation Failed".') -> sdk.Error:
    error = sdk.Error(message)
    error.code = code
    return error


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        pytest.param(
            sdk.AuthError("Error during SSO authentication access_denied : Cannot authenticate"),
            errors.CloudAuthFailed,
            id="sso-access-denied",
        ),
        pytest.param(coded(401), errors.CloudAuthFailed, id="http-401"),
        pytest.param(coded(403), errors.CloudAuthFailed, id="http-403"),
        pytest.param(sdk.NotFoundError("Entity not found"), errors.NotFound, id="http-404"),
        pytest.param(
            sdk.ConnectionError("Error while sending HTTP request: (7, 'refused')"),
            errors.CloudUnreachable,
            id="connection-refused-at-login",
        ),
        pytest.param(sdk.TimeoutError("timed out"), errors.CloudUnreachable, id="timeout"),
        pytest.param(
            sdk.Error("Failed to read response: [(<curl>, 7, 'Could not connect to server')]"),
            errors.CloudUnreachable,
            id="connection-refused-on-request",
        ),
        pytest.param(
            sdk.Error("Error while sending HTTP request: (60, 'SSL certificate problem')"),
            errors.CloudUnreachable,
            id="tls-verify",
        ),
        pytest.param(
            sdk.Error("The response content type 'text/html' isn't the expected XML"),
            errors.CloudUnreachable,
            id="proxy-error-page",
        ),
        pytest.param(coded(503), errors.CloudUnreachable, id="http-503"),
        pytest.param(coded(429), errors.CloudThrottled, id="http-429"),
        pytest.param(coded(400), errors.InvalidRequest, id="http-400"),
        pytest.param(coded(409), errors.CloudError, id="http-409-locked"),
        pytest.param(coded(500), errors.CloudError, id="http-500"),
        pytest.param(sdk.Error("something else"), errors.CloudError, id="other-sdk-error"),
        pytest.param(ValueError("bad XML"), errors.CloudError, id="not-an-sdk-error"),
    ],
)
def test_translation(exc: Exception, kind: type[errors.CloudError]) -> None:
    translated = translate("ListVms", exc)
    assert type(translated) is kind
    assert translated.provider == "zvirt"
    assert translated.operation == "ListVms"


def test_a_conflict_stays_retryable() -> None:
    assert translate("StartVm", coded(409)).retryable


def test_every_call_is_counted_with_its_outcome() -> None:
    base = ZvirtBase(ZvirtSettings(api_url="https://engine.invalid/ovirt-engine/api"))

    def sample(outcome: str) -> float:
        labels = {"provider": "zvirt", "operation": "UnitProbe", "outcome": outcome}
        return REGISTRY.get_sample_value("cloud_api_requests_total", labels) or 0.0

    before = {o: sample(o) for o in ("success", "invalid", "unreachable")}
    assert base.call("UnitProbe", lambda api: "answer") == "answer"
    with pytest.raises(errors.CloudUnreachable):
        base.call("UnitProbe", lambda api: (_ for _ in ()).throw(sdk.ConnectionError("down")))
    with pytest.raises(errors.InvalidRequest):
        base.call("UnitProbe", lambda api: (_ for _ in ()).throw(coded(400)))
    assert {o: sample(o) - before[o] for o in before} == {
        "success": 1,
        "invalid": 1,
        "unreachable": 1,
    }
