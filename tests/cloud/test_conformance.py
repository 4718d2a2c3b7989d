"""Every provider's driver against its real test backend, with the same checks for each.

Declared capability ⇔ implemented operations that work; an endpoint that does not answer is
``CloudUnreachable``; wrong credentials are ``CloudAuthFailed``; an unknown ID is absence only
where the cloud positively said so; every call is counted in ``cloud_api_requests_total``.

Rules: a cloud joins with one entry in :data:`tests.cloud.backends.BACKENDS`; nothing here is
provider-specific.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from prometheus_client import REGISTRY

from cloudloop.cloud import errors
from cloudloop.cloud.calls import OUTCOMES
from cloudloop.cloud.driver import (
    CAPABILITY_OPERATIONS,
    Capability,
    CloudDriver,
    part_or_unsupported,
)
from cloudloop.cloud.registry import PROVIDERS, Settings
from tests.cloud.backends import BACKENDS, Backend, is_absence

pytestmark = pytest.mark.stack


def test_every_registered_provider_has_a_backend() -> None:
    assert set(BACKENDS) == set(PROVIDERS)


@pytest.fixture(params=sorted(BACKENDS), ids=sorted(BACKENDS), scope="module")
def backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param](request)


@pytest.fixture
def driver(backend: Backend) -> Iterator[CloudDriver]:
    made = backend.driver()
    yield made
    close = getattr(made, "close", None)
    if callable(close):
        close()


def requests(provider: str) -> dict[str, float]:
    """``cloud_api_requests_total`` of ``provider`` summed by outcome."""
    totals = dict.fromkeys(OUTCOMES, 0.0)
    for metric in REGISTRY.collect():
        if metric.name != "cloud_api_requests":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels.get("provider") == provider:
                outcome = sample.labels["outcome"]
                totals[outcome] = totals.get(outcome, 0.0) + sample.value
    return totals


def counted(provider: str, call: Callable[[], object]) -> tuple[object, dict[str, float]]:
    before = requests(provider)
    try:
        answer: object = call()
    except errors.CloudError as exc:
        answer = exc
    after = requests(provider)
    return answer, {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k)}


def test_declared_capabilities_are_proved_and_the_rest_are_not_supported(
    backend: Backend, driver: CloudDriver
) -> None:
    declared = set(driver.capabilities)
    registered = PROVIDERS[backend.name].make_driver(Settings(provider=backend.name))
    assert type(registered) is type(driver), "the backend tests the driver the registry builds"
    assert declared == set(backend.proves), "each declared capability is proved, and only those"
    for capability in Capability:
        assert driver.supports(capability) is (capability in declared)
    for capability, prove in backend.proves.items():
        answer, calls = counted(backend.name, lambda prove=prove: prove(driver))  # type: ignore[misc]
        assert not isinstance(answer, errors.CloudError), f"{capability}: {answer}"
        assert sum(calls.values()) >= 1, f"{capability}: the calls were not counted"
        assert set(calls) <= {"success", "not_found"}, f"{capability}: {calls}"


def _undeclared() -> list[object]:
    params: list[object] = []
    for name, record in sorted(PROVIDERS.items()):
        declared = record.make_driver(Settings(provider=name)).capabilities
        params += [
            pytest.param(name, c, id=f"{name}-{c.value}") for c in Capability if c not in declared
        ]
    return params


@pytest.mark.parametrize(("provider", "capability"), _undeclared())
def test_an_undeclared_capability_raises_not_supported(
    provider: str, capability: Capability
) -> None:
    """The facade has no such part, and the stand-in a consumer is wired with refuses every
    operation with ``NotSupported`` (never an ``AttributeError``)."""
    driver = PROVIDERS[provider].make_driver(Settings(provider=provider))
    assert getattr(driver, capability.value) is None and not driver.supports(capability)
    given = part_or_unsupported(getattr(driver, capability.value), driver.provider, capability)
    for operation_name in CAPABILITY_OPERATIONS[capability][0]:
        with pytest.raises(errors.NotSupported):
            getattr(given, operation_name)(None)


def test_an_endpoint_that_does_not_answer_is_unreachable(backend: Backend) -> None:
    answer, calls = counted(backend.name, lambda: backend.probe(backend.unreachable()))
    assert isinstance(answer, errors.CloudUnreachable), answer
    assert answer.retryable
    assert calls.get("unreachable", 0) >= 1 and set(calls) == {"unreachable"}, calls


def test_wrong_credentials_are_an_auth_failure_never_absence(backend: Backend) -> None:
    answer, calls = counted(backend.name, lambda: backend.probe(backend.wrong_credentials()))
    assert isinstance(answer, errors.CloudAuthFailed), answer
    assert not answer.retryable
    assert calls.get("auth_failed", 0) >= 1 and set(calls) == {"auth_failed"}, calls


def test_an_unknown_id_is_a_positive_absence(backend: Backend, driver: CloudDriver) -> None:
    for capability, lookup in backend.unknown.items():
        answer, calls = counted(backend.name, lambda lookup=lookup: lookup(driver))  # type: ignore[misc]
        assert is_absence(answer) or isinstance(answer, errors.NotFound), f"{capability}: {answer}"
        assert sum(calls.values()) >= 1 and set(calls) <= {"success", "not_found"}, calls
