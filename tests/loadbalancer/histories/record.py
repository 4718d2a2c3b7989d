"""Record a ``LoadBalancer`` workflow history for ``test_replay.py``, with fake activities.

``python -m tests.loadbalancer.histories.record OUT.json [--resync-s S]``, run from the tree
whose workflow code should be recorded (``git archive <commit> | tar -x`` for an older one): a
Temporal dev server, a worker with that tree's workflow, and activities that only answer. The
history covers an ensure, a node-set change, (with ``--resync-s``) two drift checks, one of them
repairing, and the teardown. The ``apply`` signals carry ``resync_period_s`` as a plain field,
so an older workflow (which ignores it) records the history a mixed deployment would make.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from cloudloop.messages import loadbalancer as messages
from devstack.local import LocalStack, StackOptions
from workflows.loadbalancer import LoadBalancerWorkflow

UID = "00000000-0000-0000-0000-00000000cafe"


def _fakes() -> list[Any]:
    names = messages.LoadBalancerActivity
    resyncs = 0

    @activity.defn(name=names.ENSURE)
    async def ensure(input: messages.EnsureLoadBalancerInput) -> Any:
        return messages.EnsureLoadBalancerResult(ingress=["lb.example"])

    @activity.defn(name=names.UPDATE_BACKENDS)
    async def update_backends(input: messages.UpdateBackendsInput) -> None:
        return None

    @activity.defn(name=names.GET)
    async def get(input: messages.LoadBalancerLookup) -> Any:
        return messages.LoadBalancerFound(exists=True, hostname="lb.example")

    @activity.defn(name=names.DELETE)
    async def delete(input: messages.DeleteLoadBalancerInput) -> bool:
        return True

    @activity.defn(name="kube.record_event")
    async def record_event(input: Any) -> None:
        return None

    fakes: list[Any] = [ensure, update_backends, get, delete, record_event]
    if hasattr(names, "RESYNC"):

        @activity.defn(name=names.RESYNC)
        async def resync(input: Any) -> Any:
            nonlocal resyncs
            resyncs += 1
            repaired = ["listener 443 missing"] if resyncs == 1 else []
            return {"repaired": repaired, "ingress": ["lb.example"], "service_gone": False}

        fakes.append(resync)
    return fakes


def _apply(nodes: list[str], resync_s: float) -> dict[str, Any]:
    return {
        "desired": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "node_port": 30080}],
            "nodes": [{"name": n, "provider_id": f"aws:///us-east-1a/i-{n}"} for n in nodes],
        },
        "observed_ingress": [],
        "resync_period_s": resync_s,
    }


async def _wait(handle: Any, check: Any) -> None:
    for _ in range(300):
        state = await handle.query(messages.LoadBalancerQuery.STATE)
        if check(state):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the workflow did not get there")


async def record(out: Path, resync_s: float) -> None:
    with tempfile.TemporaryDirectory() as state_dir:
        options = StackOptions(state_dir=Path(state_dir), kube=(), moto=False)
        with LocalStack(options) as stack:
            client = await Client.connect(
                stack.temporal_address, data_converter=pydantic_data_converter
            )
            queue = f"record-{uuid.uuid4().hex[:8]}"
            async with Worker(
                client, task_queue=queue, workflows=[LoadBalancerWorkflow], activities=_fakes()
            ):
                target = {
                    "service": {
                        "plural": "services",
                        "kind": "Service",
                        "namespace": "shop",
                        "name": "web",
                        "uid": UID,
                    },
                    "cluster": "prod",
                    "provider": "aws",
                }
                handle = await client.start_workflow(
                    "LoadBalancer", {"target": target}, id=f"lb/shop/web/{UID}", task_queue=queue
                )
                await handle.signal("apply", _apply(["a", "b"], resync_s))
                await _wait(handle, lambda s: (s.get("applied") or {}).get("nodes"))
                await handle.signal("apply", _apply(["a"], resync_s))
                await _wait(handle, lambda s: len(s["applied"]["nodes"]) == 1)
                if resync_s:
                    await asyncio.sleep(resync_s * 2.5)
                await handle.signal("tear_down")
                await handle.result()
                history = await handle.fetch_history()
    out.write_text(history.to_json())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--resync-s", type=float, default=0.0)
    args = parser.parse_args()
    asyncio.run(record(args.out, args.resync_s))


if __name__ == "__main__":
    main()
