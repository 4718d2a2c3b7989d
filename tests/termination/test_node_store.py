"""The termination handler's Node store: shared with the CCM when that lists every Node, else
its own of node identities, listed only once a Node may be needed; its AWS calls share the
driver's session (one EC2 client in the process)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.termination import InstanceInfo, TerminationClient
from cloudloop.kube.api import Kube
from cloudloop.kube.informer import Informers
from cloudloop.settings import CcmSettings, NthSettings
from starters.context import StarterContext
from starters.termination import QueueProcessor, node_identity

FULL_NODE: dict[str, Any] = {
    "kind": "Node",
    "metadata": {
        "name": "ip-10-0-0-1.ec2.internal",
        "resourceVersion": "7",
        "uid": "u",
        "labels": {"kubernetes.io/hostname": "ip-10-0-0-1"},
        "annotations": {"a": "b"},
    },
    "spec": {"providerID": "aws:///us-east-1a/i-0123", "taints": [{"key": "k"}]},
    "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": []},
}


def test_node_identity_keeps_name_version_and_provider_id() -> None:
    assert node_identity(FULL_NODE) == {
        "metadata": {"name": "ip-10-0-0-1.ec2.internal", "resourceVersion": "7"},
        "spec": {"providerID": "aws:///us-east-1a/i-0123"},
    }
    assert node_identity({"metadata": {"name": "n", "resourceVersion": "1"}}) == {
        "metadata": {"name": "n", "resourceVersion": "1"}
    }


def context(node_selector: str) -> StarterContext:
    settings = Settings(cluster_name="c", ccm=CcmSettings(node_selector=node_selector))
    kube = cast(Kube, NodesKube([]))
    return StarterContext(
        settings=settings,
        kube=kube,
        client=cast(Client, None),
        driver=AwsDriver(AWS.section(settings)),
        informers=Informers(kube),
    )


def test_shares_the_ccm_informer_when_it_holds_every_node() -> None:
    shared = context("")
    processor = QueueProcessor.from_context(shared)
    assert processor is not None
    assert processor.nodes is shared.informers.nodes()

    selected = context("pool=a")
    processor = QueueProcessor.from_context(selected)
    assert processor is not None
    assert processor.nodes is not selected.informers.nodes()
    assert processor.nodes.transform is node_identity


def test_the_handler_shares_the_drivers_session() -> None:
    settings = Settings(cluster_name="c")
    section = AWS.section(settings)
    driver = AwsDriver(section)
    assert AWS.termination is not None
    assert AWS.termination(section, settings.nth, driver).ec2_base is driver.session
    assert AWS.termination(section, settings.nth, None).ec2_base is not driver.session
    other = AwsDriver(section.model_copy(update={"region": "eu-west-1"}))
    assert AWS.termination(section, settings.nth, other).ec2_base is not other.session


class NodesKube:
    """Lists ``nodes``; a watch sees nothing until it is released."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.lists = 0
        self.released = threading.Event()

    def list(self, resource: Any, namespace: Any = None, **query: Any) -> dict[str, Any]:
        self.lists += 1
        items = [{**n, "metadata": dict(n["metadata"])} for n in self.nodes]
        return {"items": items, "metadata": {"resourceVersion": "10"}}

    def stream(
        self,
        path: str,
        query: dict[str, Any],
        *,
        read_timeout_s: float,
        opened: Callable[[Any], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        self.released.wait(30)
        yield from ()


class TaggedInstances:
    def __init__(self) -> None:
        self.tagged: list[InstanceInfo] = []

    def tagged_instances(self, tag_key: str) -> Iterator[InstanceInfo]:
        return iter(self.tagged)


def test_nodes_are_listed_once_a_tagged_instance_is_seen() -> None:
    kube = NodesKube([FULL_NODE])
    aws = TaggedInstances()
    processor = QueueProcessor(
        cast(Kube, kube),
        cast(Client, None),
        cast(TerminationClient, aws),
        NthSettings(),
        task_queue="q",
        cluster="c",
    )
    try:
        assert processor.refresh_tagged_metrics() == (0, 0)
        assert kube.lists == 0  # no tagged instance: no Node to count, none listed

        aws.tagged = [InstanceInfo(id="i-0123", state="running")]
        assert processor.refresh_tagged_metrics() == (1, 1)
        assert kube.lists == 1
        assert processor.nodes.store == {"ip-10-0-0-1.ec2.internal": node_identity(FULL_NODE)}
        # Found in the projection by private DNS name (upstream's default) and by providerID.
        name = str(FULL_NODE["metadata"]["name"])
        by_name = InstanceInfo(id="i-0123", state="running", private_dns_name=name)
        assert processor.find_node(by_name) == name
        processor.nth = NthSettings(use_provider_id=True)
        assert processor.find_node(InstanceInfo(id="i-0123", state="running")) == name
    finally:
        processor.nodes.stop()
        kube.released.set()


def test_sqs_and_auto_scaling_clients_are_on_the_same_boto3_session() -> None:
    settings = Settings(cluster_name="c")
    section = AWS.section(settings)
    driver = AwsDriver(section)
    assert AWS.termination is not None
    calls = AWS.termination(section, settings.nth, driver)
    assert calls.sqs_base._session is driver.session._session
    assert calls.autoscaling_base._session is driver.session._session
    assert calls.sqs_base.settings.timeout_s == max(
        section.timeout_s, settings.nth.wait_time_s + 10
    )
