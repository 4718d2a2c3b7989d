"""What the node-sync stack tests share: a running NodeSync, Nodes as a kubelet registers them
(tainted, labelled with the test's scope), their Ready condition, and waits on them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import NODES
from cloudloop.rules import node as rules
from starters.node import NodeSync
from tests.support.parts import has


def fast_sync(settings: Settings, scope: str, **ccm: Any) -> Settings:
    """``settings`` with NodeSync limited to the test's Nodes and quick loops (``ccm`` adds)."""
    section = settings.ccm.model_copy(
        update={
            "node_selector": f"cloudloop-test={scope}",
            "node_monitor_period_s": 0.5,
            "node_status_update_frequency_s": 1.0,
            **ccm,
        }
    )
    return settings.model_copy(update={"ccm": section})


@contextlib.asynccontextmanager
async def node_sync(
    kube: Kube, settings: Settings, driver: CloudDriver | None = None
) -> AsyncIterator[NodeSync]:
    informers = Informers(kube)
    sync = NodeSync(
        kube,
        has((driver or AwsDriver(AWS.section(settings))).instances),
        informers.nodes(label_selector=settings.ccm.node_selector),
        settings.ccm,
    )
    task = asyncio.create_task(sync.run())
    try:
        yield sync
    finally:
        sync.stop()
        informers.stop()
        await asyncio.wait_for(task, 10)


def make_node(
    kube: Kube,
    name: str,
    scope: str,
    *,
    provider_id: str = "",
    tainted: bool = True,
    annotations: dict[str, str] | None = None,
) -> Node:
    spec: dict[str, Any] = {}
    if tainted:
        spec["taints"] = [
            {"key": rules.UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
        ]
    if provider_id:
        spec["providerID"] = provider_id
    node = kube.create(
        NODES,
        {
            "metadata": {
                "name": name,
                "labels": {"cloudloop-test": scope},
                "annotations": annotations or {},
            },
            "spec": spec,
        },
    )
    kube.patch(
        NODES,
        name,
        {"status": {"addresses": [{"type": "Hostname", "address": name}]}},
        subresource="status",
    )
    return node


def set_ready(kube: Kube, name: str, status: str) -> None:
    from cloudloop.kube.conditions import now_rfc3339

    now = now_rfc3339()
    kube.patch(
        NODES,
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": status,
                        "reason": "Test",
                        "message": "set by test",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ]
            }
        },
        subresource="status",
        patch_type="strategic",
    )


def get_node(kube: Kube, name: str) -> Node | None:
    """The Node as the API server has it now, typed (the tests' reads of a Node)."""
    return cast("Node | None", kube.get(NODES, name))


def node_when(
    kube: Kube, name: str, predicate: Callable[[Node], bool]
) -> Callable[[], Node | None]:
    """A check for ``eventually``: the Node once ``predicate`` holds for it."""

    def check() -> Node | None:
        node = get_node(kube, name)
        return node if node is not None and predicate(node) else None

    return check


def cleanup(kube: Kube, scope: str) -> None:
    for node in kube.list(NODES, labelSelector=f"cloudloop-test={scope}")["items"]:
        kube.delete(NODES, node["metadata"]["name"])
