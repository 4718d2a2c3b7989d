"""One cluster, one set of queues: the task queues and workflow-ID scope derive from
``cluster_name``; an explicit queue wins; bad names are refused at start."""

from __future__ import annotations

import pytest

from cloudloop.cloud.registry import Settings
from cloudloop.messages.layout import module_workflow_id, plan_workflow_id, workflow_id
from cloudloop.messages.scope import scoped_id
from cloudloop.settings import LEGACY_TASK_QUEUE, TemporalSettings, derived_task_queue


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CLOUDLOOP_TEMPORAL__TASK_QUEUE", "CLOUDLOOP_CLUSTER_NAME", "CLOUDLOOP_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def test_queues_derive_from_the_cluster_name() -> None:
    settings = Settings(cluster_name="prod-eu")
    temporal = settings.temporal
    assert temporal.task_queue == derived_task_queue("prod-eu") == "cloudloop-prod-eu"
    assert temporal.queue_for("machine") == "cloudloop-prod-eu-machine"
    assert temporal.all_queues() == [
        "cloudloop-prod-eu",
        "cloudloop-prod-eu-loadbalancer",
        "cloudloop-prod-eu-machine",
        "cloudloop-prod-eu-volume",
        "cloudloop-prod-eu-drain",
    ]
    assert temporal.id_scope == "cloudloop-prod-eu"


def test_two_clusters_share_no_queue_and_no_id() -> None:
    a, b = Settings(cluster_name="a").temporal, Settings(cluster_name="b").temporal
    assert not set(a.all_queues()) & set(b.all_queues())
    assert scoped_id(a.id_scope, "drain/node-1/i-1/0") != scoped_id(
        b.id_scope, "drain/node-1/i-1/0"
    )


def test_the_environment_derives_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDLOOP_CLUSTER_NAME", "from-env")
    assert Settings().temporal.task_queue == "cloudloop-from-env"


def test_an_explicit_queue_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDLOOP_CLUSTER_NAME", "prod")
    monkeypatch.setenv("CLOUDLOOP_TEMPORAL__TASK_QUEUE", "ours")
    temporal = Settings().temporal
    assert temporal.task_queue == "ours"
    assert temporal.queue_for("drain") == "ours-drain"
    assert temporal.id_scope == "ours"


def test_the_legacy_queue_keeps_the_old_ids() -> None:
    """An install pinned to the old default queue keeps its running workflows' IDs."""
    temporal = Settings(temporal=TemporalSettings(task_queue=LEGACY_TASK_QUEUE)).temporal
    assert temporal.task_queue == "cloudloop"
    assert temporal.id_scope == ""
    assert scoped_id(temporal.id_scope, "drain/n/i/0") == "drain/n/i/0"


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        pytest.param(None, "q", id="default-the-queue"),
        pytest.param("", "", id="pinned-none"),
        pytest.param("other", "other", id="explicit"),
    ],
)
def test_the_id_scope_setting(scope: str | None, expected: str) -> None:
    temporal = TemporalSettings(task_queue="q", workflow_id_scope=scope)
    assert temporal.id_scope == expected


def test_layout_ids_carry_the_scope() -> None:
    assert workflow_id("k8s") == "layout/k8s"
    assert workflow_id("k8s", "cloudloop-a") == "cloudloop-a/layout/k8s"
    assert plan_workflow_id("k8s", "cloudloop-a") == "cloudloop-a/layout/k8s/plan"
    assert module_workflow_id("k8s", "base", "cloudloop-a") == "cloudloop-a/layout/k8s/base"
    assert module_workflow_id("k8s", "base") == "layout/k8s/base"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("a/b", id="slash"),
        pytest.param("has space", id="blank"),
        pytest.param("-lead", id="leading-dash"),
        pytest.param("trail-", id="trailing-dash"),
        pytest.param("x" * 64, id="too-long"),
        pytest.param("café", id="non-ascii"),
    ],
)
def test_a_bad_cluster_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="cluster_name"):
        Settings(cluster_name=name)


@pytest.mark.parametrize(
    "name", ["prod", "Prod.EU_1", "a", "x" * 63, "cloudloop"], ids=lambda n: n[:12]
)
def test_good_cluster_names(name: str) -> None:
    assert Settings(cluster_name=name).temporal.task_queue == f"cloudloop-{name}"


@pytest.mark.parametrize(
    "queue",
    [
        pytest.param("a/b", id="slash"),
        pytest.param("/_sys/x", id="reserved"),
        pytest.param("with space", id="blank"),
        pytest.param("q" * 201, id="too-long"),
    ],
)
def test_a_bad_task_queue_is_refused(queue: str) -> None:
    with pytest.raises(ValueError, match="task_queue"):
        TemporalSettings(task_queue=queue)


def test_a_bad_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="workflow_id_scope"):
        TemporalSettings(task_queue="q", workflow_id_scope="a/b")
