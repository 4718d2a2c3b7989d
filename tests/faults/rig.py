"""The fault tests' rig: ``cloudloop worker``/``starter`` as real processes kept running the way
a kubelet would (restarted when they exit), the cluster's cloud in moto, and the figures the
note reports (time to converge, duplicates, orphans, deleted nodes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions

from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES, SERVICES
from cloudloop.net import free_port
from cloudloop.rules import node as node_rules
from devstack.local import LocalStack

CLI = [sys.executable, "-m", "cloudloop.cli"]
#: Runs of each fault scenario: 1 in ``make test``; ``CLOUDLOOP_FAULT_RUNS=3`` for the note's
#: "three runs in a row".
RUNS = list(range(1, int(os.environ.get("CLOUDLOOP_FAULT_RUNS", "1")) + 1))


def aws(stack: LocalStack, service: str) -> Any:
    """A boto3 client on moto itself (set-up and checks; the product goes through the front)."""
    make: Any = boto3.client
    return make(
        service,
        region_name="us-east-1",
        endpoint_url=stack.moto_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def base_env(stack: LocalStack, cluster: str, task_queue: str, **extra: str) -> dict[str, str]:
    """The environment of a worker or starter of ``cluster`` on the stack (AWS provider)."""
    return {
        **os.environ,
        "CLOUDLOOP_CLUSTER_NAME": cluster,
        "CLOUDLOOP_PROVIDER": "aws",
        "CLOUDLOOP_KUBECONFIG": str(stack.kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": task_queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "2",
        "CLOUDLOOP_AWS__ENDPOINT_URL": stack.aws_endpoint,
        "CLOUDLOOP_AWS__REGION": "us-east-1",
        "CLOUDLOOP_AWS__ACCESS_KEY_ID": "testing",
        "CLOUDLOOP_AWS__SECRET_ACCESS_KEY": "testing",
        "CLOUDLOOP_AWS__TIMEOUT_S": "10",
        "CLOUDLOOP_CCM__NODE_MONITOR_PERIOD_S": "2",
        "CLOUDLOOP_CCM__CONCURRENT_NODE_SYNCS": "4",
        "CLOUDLOOP_CCM__CONCURRENT_SERVICE_SYNCS": "4",
        "CLOUDLOOP_CCM__CONFIGURE_CLOUD_ROUTES": "false",
        "CLOUDLOOP_DISCOVERY__ENABLED": "false",
        "CLOUDLOOP_LEADER_ELECTION__NAMESPACE": "default",
        "CLOUDLOOP_LEADER_ELECTION__NAME": f"starter-{task_queue}",
        **extra,
    }


class Process:
    """``cloudloop worker`` or ``starter``, restarted whenever it exits (as a kubelet does)."""

    def __init__(self, kind: str, env: dict[str, str], log_dir: Path, name: str = "") -> None:
        self.kind = kind
        self.name = name or kind
        self.env = env
        self.log_dir = log_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.exits: list[int] = []  # exit codes of runs that ended by themselves
        self._keep = False
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, *, wait: bool = True) -> Process:
        with self._lock:
            self._spawn()
        self._keep = True
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, daemon=True)
            self._watcher.start()
        if wait:
            self.wait_ready()
        return self

    def _spawn(self) -> None:
        self.starts += 1
        log = self.log_dir / f"{self.name}-{self.starts}.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*CLI, self.kind],
                env={**self.env, "CLOUDLOOP_METRICS_PORT": str(self.port)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self._lock:
                if not self._keep:
                    return
                if self.proc is not None and self.proc.poll() is not None:
                    self.exits.append(int(self.proc.returncode))
                    time.sleep(1.0)  # the kubelet's restart back-off, short
                    self._spawn()

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while self.get("/readyz")[0] != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready:\n{self.tail()}")
            time.sleep(0.2)

    def kill(self, *, restart: bool = True) -> None:
        """SIGKILL now; started again at once unless ``restart`` is false (its pod is gone)."""
        with self._lock:
            assert self.proc is not None and self.proc.poll() is None, f"{self.name} is down"
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.exits.append(-9)
            if restart:
                self._spawn()
            else:
                self._keep = False

    def stop(self) -> None:
        self._keep = False
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=3) as r:
                return int(r.status), r.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")
        except OSError:
            return 0, ""

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The sum of ``name``'s samples whose labels include ``labels`` (0 when absent)."""
        status, text = self.get("/metrics")
        if status != 200:
            return 0.0
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            if head.split("{", 1)[0] != name:
                continue
            if all(f'{k}="{v}"' in head for k, v in (labels or {}).items()):
                total += float(value)
        return total

    def tail(self, lines: int = 40) -> str:
        log = self.log_dir / f"{self.name}-{self.starts}.log"
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


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
