"""What every benchmark gets: the running stack, clients and settings pointing at it."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from devstack.crds import apply_crds
from devstack.devmode import stack_settings
from devstack.local import LocalStack


@dataclass
class BenchContext:
    stack: LocalStack
    kube: Kube
    client: Client
    settings: Settings

    @classmethod
    async def create(cls, stack: LocalStack) -> BenchContext:
        kube = Kube(api_client(stack.kubeconfig, qps_pool=64))
        apply_crds(kube)
        settings = stack_settings(stack, task_queue="bench", cluster="bench")
        client = await temporal.connect(settings.temporal)
        return cls(stack=stack, kube=kube, client=client, settings=settings)
