"""Fault tests: each module runs its own local stack, because these tests kill and restart its
parts (kube-apiserver, the Temporal dev server) or change how they behave (the history-count
suggestion, the AWS front's throttling), which the session's shared stack must never see."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from devstack.crds import apply_crds
from devstack.devmode import stack_settings
from devstack.kube import KubeOptions
from devstack.local import LocalStack, StackOptions


@contextlib.contextmanager
def own_stack(state_dir: Path, **options: object) -> Iterator[LocalStack]:
    """A local stack of the test module's own: Temporal, moto behind the AWS front, one
    control plane (no kubelets unless asked)."""
    defaults: dict[str, object] = {"kube": (KubeOptions(),)}
    local = LocalStack(StackOptions(state_dir=state_dir, **{**defaults, **options}))  # type: ignore[arg-type]
    local.start()
    try:
        apply_crds(Kube(api_client(local.kubeconfig)))
        yield local
    finally:
        local.stop()


def own_settings(stack: LocalStack, name: str) -> Settings:
    return stack_settings(stack, task_queue=name, cluster=f"{name}-{os.getpid()}")
