"""What the DVP machine stack tests share: a parent namespace and a driver per test, the starter
(in-process or not), and queries on the InfraMachine and on the parent cluster's objects."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import CapiCluster, InfraObject
from cloudloop.kube.conditions import get_condition
from cloudloop.kube.resources import Resource
from cloudloop.messages.machine import MachineTimings, PollSchedule
from cloudloop.rules import machine as capi
from devstack import machine_fixtures
from devstack.backends.dvp import dvp_settings
from devstack.dvp_simulator import DvpParent
from starters.machine import MachineStarter

#: Short waits so a killed worker's activities move on in seconds.
TEST_TIMINGS = MachineTimings(
    heartbeat_timeout_s=3.0,
    observe_window_s=20.0,
    poll=PollSchedule(initial_s=0.05, factor=1.5, max_s=0.5),
    refresh_interval_s=60.0,
    retry_backoff_s=2.0,
    retry_backoff_max_s=10.0,
)
CLOUD_INIT = b"#cloud-config\nruncmd: [echo bootstrap-secret-data]\n"


@dataclass
class DvpMachines:
    """One test's view: CAPI objects in ``namespace``, VMs in ``parent_namespace``."""

    kube: Kube
    parent: DvpParent
    namespace: str
    parent_namespace: str
    cluster_uuid: str
    driver: DvpDriver
    starter: MachineStarter | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def dvp_settings(self) -> DvpSettings:
        return self.driver.settings

    def env(self) -> dict[str, str]:
        """The DVP settings as a worker process reads them."""
        return {
            "CLOUDLOOP_PROVIDER": "dvp",
            "CLOUDLOOP_DVP__KUBECONFIG": str(self.parent.kubeconfig),
            "CLOUDLOOP_DVP__NAMESPACE": self.parent_namespace,
            "CLOUDLOOP_DVP__CLUSTER_UUID": self.cluster_uuid,
        }

    # -- CAPI objects ----------------------------------------------------------------------
    def cluster(self, name: str = "c1", **kwargs: Any) -> CapiCluster:
        return machine_fixtures.create_cluster(self.kube, self.namespace, name, DVP_KINDS, **kwargs)

    def machine(
        self,
        name: str,
        *,
        cluster: str = "c1",
        spec: dict[str, Any] | None = None,
        bootstrap: bool = True,
        annotations: dict[str, str] | None = None,
    ) -> InfraObject:
        secret = f"{name}-bootstrap" if bootstrap else None
        if secret:
            machine_fixtures.create_bootstrap_secret(self.kube, self.namespace, secret, CLOUD_INIT)
        return machine_fixtures.create_machine(
            self.kube,
            self.namespace,
            name,
            cluster=cluster,
            kinds=DVP_KINDS,
            spec=spec or machine_fixtures.dvp_machine_spec(),
            bootstrap_secret=secret,
            annotations=annotations,
        )

    def infra(self, name: str) -> InfraObject | None:
        return self.kube.get(DVP_KINDS.machine, name, self.namespace)

    def condition(self, name: str, type: str) -> dict[str, Any]:
        return get_condition(self.infra(name) or {}, type) or {}

    def ready(self, name: str) -> InfraObject | None:
        obj = self.infra(name) or {}
        status = obj.get("status") or {}
        provisioned = (status.get("initialization") or {}).get("provisioned")
        return obj if status.get("ready") and provisioned else None

    def reason(self, name: str) -> str:
        return str(self.condition(name, capi.VM_READY).get("reason", ""))

    def has_reason(self, name: str, reason: str) -> bool:
        return self.reason(name) == reason

    def delete(self, name: str) -> None:
        self.kube.delete(DVP_KINDS.machine, name, self.namespace)

    def annotate(self, name: str, annotations: dict[str, str | None]) -> None:
        self.kube.patch(
            DVP_KINDS.machine, name, {"metadata": {"annotations": annotations}}, self.namespace
        )

    # -- the parent cluster ----------------------------------------------------------------
    def parent_get(self, resource: Resource, name: str) -> dict[str, Any] | None:
        return self.parent.kube.get(resource, name, self.parent_namespace)

    def parent_names(self, resource: Resource, selector: str) -> set[str]:
        items = self.parent.kube.list(resource, self.parent_namespace, labelSelector=selector)
        return {item["metadata"]["name"] for item in items.get("items", [])}

    def parent_objects(
        self, machine_uid: str | None = None, *, hostname: str | None = None
    ) -> dict[str, set[str]]:
        """Every VM, disk and cloud-init Secret made for machines: all, one machine UID's, or
        every one made for a machine name (under any UID)."""
        if machine_uid:
            selector = f"{r.MACHINE_UID_LABEL}={machine_uid}"
        elif hostname:
            selector = f"{r.HOSTNAME_LABEL}={hostname}"
        else:
            selector = r.MACHINE_UID_LABEL
        return {
            "vms": self.parent_names(r.VIRTUAL_MACHINES, selector),
            "disks": self.parent_names(r.VIRTUAL_DISKS, selector),
            "secrets": self.parent_names(r.SECRETS, selector),
        }

    def vm_phase(self, name: str) -> str:
        vm = self.parent_get(r.VIRTUAL_MACHINES, name) or {}
        return str((vm.get("status") or {}).get("phase", ""))

    # -- the starter -----------------------------------------------------------------------
    def start_starter(self, client: Client, task_queue: str, cluster: str) -> MachineStarter:
        self.starter = MachineStarter(
            self.kube,
            client,
            kinds=DVP_KINDS,
            task_queue=task_queue,
            cluster=cluster,
            namespace=self.namespace,
            timings=TEST_TIMINGS,
        )
        self._tasks.append(asyncio.create_task(self.starter.run()))
        return self.starter

    async def close(self) -> None:
        if self.starter is not None:
            self.starter.stop()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.parent.simulator.release()
        # Leave nothing that blocks the namespace's deletion.
        for obj in self.kube.list(DVP_KINDS.machine, self.namespace).get("items", []):
            if obj["metadata"].get("finalizers"):
                self.kube.patch(
                    DVP_KINDS.machine,
                    obj["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                    self.namespace,
                )


@contextlib.asynccontextmanager
async def dvp_machines(
    kube: Kube,
    parent: DvpParent,
    namespace: str,
    *,
    parent_namespace: str | None = None,
    cluster_uuid: str | None = None,
) -> AsyncIterator[DvpMachines]:
    """A fresh parent namespace and cluster UUID unless given (a shared worker process's)."""
    if parent_namespace is None:
        parent_namespace = await asyncio.to_thread(parent.new_namespace)
    cluster_uuid = cluster_uuid or str(uuid.uuid4())
    driver = DvpDriver(
        dvp_settings(parent, parent_namespace, cluster_uuid=cluster_uuid, timeout_s=10)
    )
    machines = DvpMachines(
        kube=kube,
        parent=parent,
        namespace=namespace,
        parent_namespace=parent_namespace,
        cluster_uuid=cluster_uuid,
        driver=driver,
    )
    try:
        yield machines
    finally:
        await machines.close()
