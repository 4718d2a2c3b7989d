"""A retried eviction round still reports the pods an earlier attempt evicted (from its
heartbeat): the drain's count does not drop to the pods left for the retry."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.termination import DrainActivities
from cloudloop.kube.resources import PODS
from cloudloop.messages.termination import EvictPodsInput, EvictPodsResult, PodRef
from cloudloop.settings import NthSettings
from tests.fakes import MemoryKube


def round_input(*pods: PodRef) -> EvictPodsInput:
    return EvictPodsInput(
        node="node-a",
        pods=list(pods),
        deadline=datetime.now(UTC) + timedelta(minutes=5),
        round_s=1.0,
    )


def run(kube: MemoryKube, input: EvictPodsInput, details: Sequence[Any]) -> EvictPodsResult:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_details=details)
    result: EvictPodsResult = env.run(DrainActivities(kube, None, NthSettings()).evict_pods, input)
    return result


def test_retry_counts_the_earlier_attempts_evictions() -> None:
    first = PodRef(namespace="apps", name="web-1", uid="uid-1")
    second = PodRef(namespace="apps", name="web-2", uid="uid-2")
    # Both pods are gone: the earlier attempt evicted the first, the second went by itself.
    result = run(MemoryKube(), round_input(first, second), [{"evicted": ["uid-1"]}])
    assert result.evicted == [first] and result.remaining == []


def test_heartbeat_of_another_shape_is_ignored() -> None:
    pod = PodRef(namespace="apps", name="web-1", uid="uid-1")
    for details in ([], ["3"], [{"evicted": "uid-1"}], [{"evicted": [1, None]}]):
        assert run(MemoryKube(), round_input(pod), details).evicted == []


def test_a_still_terminating_pod_from_the_earlier_attempt_is_not_evicted_twice() -> None:
    pod = PodRef(namespace="apps", name="web-1", uid="uid-1")
    kube = MemoryKube()
    kube.put(
        PODS,
        {
            "metadata": {
                "name": "web-1",
                "namespace": "apps",
                "uid": "uid-1",
                "deletionTimestamp": "2026-12-02T00:00:00Z",
            },
            "spec": {"nodeName": "node-a"},
        },
        "apps",
    )
    result = run(kube, round_input(pod), [{"evicted": ["uid-1"]}])
    assert result.evicted == [pod]
    assert not [w for w in kube.writes if w[0] == "create"]
