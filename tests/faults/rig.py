"""The fault tests' rig: ``cloudloop worker``/``starter`` as real processes (the worker-process
harness of :mod:`tests.support.workers`) kept running the way a kubelet would (restarted when
they exit), the cluster's cloud in moto, and the figures the note reports (time to converge,
duplicates, orphans, deleted nodes)."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.exceptions

from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES, SERVICES
from cloudloop.rules import node as node_rules
from devstack.backends.aws import aws_client
from devstack.devmode import stack_settings
from devstack.local import LocalStack
from tests.support.workers import WorkerProcess, aws_env, worker_env

#: Runs of each fault scenario: 1 in ``make test``; ``CLOUDLOOP_FAULT_RUNS=3`` for the note's
#: "three runs in a row".
RUNS = list(range(1, int(os.environ.get("CLOUDLOOP_FAULT_RUNS", "1")) + 1))


def aws(stack: LocalStack, service: str) -> Any:
    """A boto3 client on moto itself (set-up and checks; the product goes through the front)."""
    return aws_client(service, stack.moto_endpoint)


def base_env(stack: LocalStack, cluster: str, task_queue: str, **extra: str) -> dict[str, str]:
    """The environment of a worker or starter of ``cluster`` on the stack (AWS provider, through
    the AWS front), built as :mod:`tests.support.workers` builds every worker's."""
    settings = stack_settings(stack, task_queue=task_queue, cluster=cluster)
    return worker_env(
        settings,
        stack,
        aws_env(
            stack.aws_endpoint, CLOUDLOOP_AWS__REGION="us-east-1", CLOUDLOOP_AWS__TIMEOUT_S="10"
        ),
        {
            "CLOUDLOOP_PROVIDER": "aws",
            "CLOUDLOOP_CCM__NODE_MONITOR_PERIOD_S": "2",
            "CLOUDLOOP_CCM__CONCURRENT_NODE_SYNCS": "4",
            "CLOUDLOOP_CCM__CONCURRENT_SERVICE_SYNCS": "4",
            "CLOUDLOOP_CCM__CONFIGURE_CLOUD_ROUTES": "false",
            "CLOUDLOOP_DISCOVERY__ENABLED": "false",
            "CLOUDLOOP_LEADER_ELECTION__NAMESPACE": "default",
            "CLOUDLOOP_LEADER_ELECTION__NAME": f"starter-{task_queue}",
        },
        extra,
        graceful_shutdown_s=2,
    )


class Process(WorkerProcess):
    """``cloudloop worker`` or ``starter`` (a :class:`~tests.support.workers.WorkerProcess`)
    started again whenever it exits, as a kubelet does; ``exits`` counts the runs that ended by
    themselves (a crash the test must see) and the kills."""

    def __init__(self, kind: str, env: dict[str, str], log_dir: Path, name: str = "") -> None:
        super().__init__(env, log_dir, name=name or kind, command=kind, ready_timeout_s=90.0)
        self.exits: list[int] = []  # exit codes of runs that ended by themselves; -9: killed
        self._keep = False
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None and self.process.popen is not None
        return self.process.popen.pid

    def start(self, *, wait: bool = True) -> Process:
        with self._lock:
            super().start(wait=False)
        self._keep = True
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, daemon=True)
            self._watcher.start()
        if wait:
            self.wait_ready()
        return self

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self._lock:
                if not self._keep:
                    return
                popen = self.process.popen if self.process is not None else None
                if popen is not None and popen.poll() is not None:
                    self.exits.append(int(popen.returncode))
                    time.sleep(1.0)  # the kubelet's restart back-off, short
                    super().start(wait=False)

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while self.get("/readyz")[0] != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready:\n{self.tail()}")
            time.sleep(0.2)

    def kill(self, *, restart: bool = True) -> None:
        """SIGKILL now; started again at once unless ``restart`` is false (its pod is gone)."""
        with self._lock:
            super().kill()
            self.exits.append(-9)
            if restart:
                super().start(wait=False)
            else:
                self._keep = False

    def stop(self) -> None:
        """Stop it for good: SIGTERM (a graceful shutdown), SIGKILL after 10 s."""
        self._keep = False
        with self._lock:
            if self.process is not None:
                self.process.stop(10)


# -- the cluster's objects ---------------------------------------------------------------------
def tainted_node(kube: Kube, name: str, label: str) -> None:
    """A new Node as the kubelet registers it under an external cloud provider."""
    kube.create(
        NODES,
        {
            "metadata": {"name": name, "labels": {"cloudloop-fault": label}},
            "spec": {
                "taints": [
                    {
                        "key": node_rules.UNINITIALIZED_TAINT,
                        "value": "true",
                        "effect": "NoSchedule",
                    }
                ]
            },
        },
    )


def lb_service(kube: Kube, namespace: str, name: str) -> None:
    kube.create(
        SERVICES,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": name},
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            },
        },
        namespace,
    )


def initialized(kube: Kube, label: str) -> tuple[int, int]:
    """(Nodes with the label, of which initialized)."""
    items = kube.list(NODES, labelSelector=f"cloudloop-fault={label}")["items"]
    return len(items), sum(1 for n in items if not node_rules.needs_init(n))


def with_ingress(kube: Kube, namespace: str) -> int:
    items = kube.list(SERVICES, namespace)["items"]
    return sum(
        1 for s in items if ((s.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    )


def elbs_of(stack: LocalStack, cluster: str) -> list[str]:
    """Names of the Classic ELBs tagged for ``cluster``."""
    elb = aws(stack, "elb")
    names = [
        d["LoadBalancerName"] for d in elb.describe_load_balancers()["LoadBalancerDescriptions"]
    ]
    mine = []
    for name in names:
        try:
            described = elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"]
        except botocore.exceptions.ClientError:  # deleted meanwhile
            continue
        for one in described:
            tags = {t["Key"]: t["Value"] for t in one.get("Tags", [])}
            if tags.get(f"kubernetes.io/cluster/{cluster}") == "owned":
                mine.append(one["LoadBalancerName"])
    return mine


@dataclass
class Figures:
    """What one fault run came to, printed as one ``FAULT-FIGURES`` JSON line."""

    fault: str
    converge_s: float = 0.0
    duplicates: int = 0
    orphans: int = 0
    deleted_nodes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def report(self) -> None:
        line = {
            "fault": self.fault,
            "converge_s": round(self.converge_s, 1),
            "duplicates": self.duplicates,
            "orphans": self.orphans,
            "deleted_nodes": self.deleted_nodes,
            **self.extra,
        }
        print(f"\nFAULT-FIGURES {json.dumps(line)}")
        results = os.environ.get("CLOUDLOOP_FAULT_FIGURES")
        if results:
            with open(results, "a") as out:
                out.write(json.dumps(line) + "\n")
