"""``cloudloop retry machine``: ask a machine's workflow to retry a failed provisioning.

A running workflow gets the ``retry`` signal; with no run open, the ``cloudloop.io/retry``
annotation gets a new token so the starter signals-with-start a new run.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from cloudloop import temporal
from cloudloop.cloud.registry import Settings, infra_kinds, provider_for
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import ObjectRef
from cloudloop.messages.machine import MachineSignal, RetryRequest, workflow_id
from cloudloop.rules import machine as capi


async def request_retry(settings: Settings, namespace: str, name: str) -> str:
    """Retry a machine's failed provisioning: signal its workflow, or, when no run is open,
    set the ``cloudloop.io/retry`` annotation so the starter starts a new one. Returns what was
    done, for the command's output."""
    from cloudloop.kube.client import api_client

    kube = Kube(api_client(settings.kubeconfig))
    own = provider_for(settings).infra_kinds
    candidates = [own] if own is not None else []
    candidates += [k for k in infra_kinds() if k not in candidates]
    for kinds in candidates:
        obj = await asyncio.to_thread(kube.get, kinds.machine, name, namespace)
        if obj is not None:
            break
    else:
        raise LookupError(f"no DeckhouseMachine or ZvirtMachine {namespace}/{name}")
    ref = ObjectRef.of(kinds.machine, obj)
    wf_id = workflow_id(namespace, name, ref.uid)
    token = uuid.uuid4().hex[:12]
    client = await temporal.connect(settings.temporal)
    handle = client.get_workflow_handle(wf_id)
    try:
        running = (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        running = False
    if running:
        await handle.signal(MachineSignal.RETRY, RetryRequest(token=token, source="cli"))
        return f"asked workflow {wf_id} to retry"
    await asyncio.to_thread(
        kube.patch,
        kinds.machine,
        name,
        {"metadata": {"annotations": {capi.RETRY_ANNOTATION: token}}},
        namespace,
    )
    return (
        f"workflow {wf_id} is not running; set {capi.RETRY_ANNOTATION}={token} "
        f"on {kinds.machine.kind} {namespace}/{name} so the starter starts it again"
    )
