"""A down API server is a ``KubeError`` (status 0), and recording an Event never raises."""

from __future__ import annotations

import pytest
from kubernetes import client

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.events import record_event
from cloudloop.kube.resources import NODES, ObjectRef, Resource
from cloudloop.net import free_port


@pytest.fixture
def dead_kube() -> Kube:
    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    configuration.retries = 0
    return Kube(client.ApiClient(configuration), timeout_s=2)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda k: k.get(NODES, "n1"), id="get"),
        pytest.param(lambda k: k.list(NODES), id="list"),
        pytest.param(lambda k: k.patch(NODES, "n1", {"metadata": {}}), id="patch"),
        pytest.param(lambda k: list(k.stream("/api/v1/nodes", {}, read_timeout_s=1)), id="watch"),
    ],
)
def test_transport_errors_are_kube_errors(dead_kube: Kube, call: object) -> None:
    with pytest.raises(KubeError) as raised:
        call(dead_kube)  # type: ignore[operator]
    assert raised.value.unreachable and raised.value.status == 0


def test_record_event_is_best_effort(dead_kube: Kube) -> None:
    ref = ObjectRef(plural="nodes", kind="Node", name="n1", uid="u1")
    record_event(dead_kube, ref, type="Warning", reason="Test", message="the API is down")


#: A group the API server does not serve (as a CRD not installed): its answer is a plain
#: ``404 page not found``, not a Status.
UNSERVED = Resource("nosuch.cloudloop.example", "v1", "widgets", "Widget", namespaced=False)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda k: k.get(UNSERVED, "w1"), id="get"),
        pytest.param(lambda k: k.list(UNSERVED), id="list"),
        pytest.param(
            lambda k: list(k.stream(UNSERVED.path(None), {}, read_timeout_s=5)), id="watch"
        ),
    ],
)
def test_an_unserved_group_is_unreachable_with_what_was_answered(kube: Kube, call: object) -> None:
    """Never the object's NotFound (a ``get`` would answer "gone"), never a bare decode error:
    unreachable (retried by every loop), saying what the server answered and why."""
    with pytest.raises(KubeError) as raised:
        call(kube)  # type: ignore[operator]
    assert raised.value.unreachable and not raised.value.not_found
    assert "404" in str(raised.value) and "CRD installed" in str(raised.value)
    assert kube.get(NODES, "no-such-node") is None  # a served kind's missing object: None
