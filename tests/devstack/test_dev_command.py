"""README command 1 as a user runs it: `cloudloop dev` is up, shows the demo, Ctrl-C cleans up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from cloudloop.net import free_port
from devstack import gotools

pytestmark = pytest.mark.stack


def processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and int(pid) != os.getpid():
            found.append(cmdline)
    return found


def test_dev_up_demo_and_ctrl_c(tmp_path: Path) -> None:
    state = tmp_path / "dev-state"
    ui_port, temporal_port = free_port(), free_port()
    log_path = tmp_path / "dev.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cloudloop.cli",
                "dev",
                "--state-dir",
                str(state),
                "--temporal-port",
                str(temporal_port),
                "--ui-port",
                str(ui_port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "cloudloop dev is up" not in log_path.read_text():
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        banner = log_path.read_text()
        kubeconfig = state / "kube" / "main" / "admin.kubeconfig"
        assert str(kubeconfig) in banner
        assert f"http://127.0.0.1:{ui_port}/namespaces/default/workflows" in banner

        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/", timeout=10) as response:
            assert response.status == 200  # the Temporal Web UI answers

        kubectl = [str(gotools.binary_path("kubectl")), "--kubeconfig", str(kubeconfig)]

        def probe_ready() -> str:
            return subprocess.run(
                [
                    *kubectl,
                    "get",
                    "cloudprobe",
                    "aws",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                ],
                capture_output=True,
                text=True,
            ).stdout

        while probe_ready() != "True":
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)

        def demo_zones() -> list[str]:
            out = subprocess.run(
                [
                    *kubectl,
                    "get",
                    "nodes",
                    "-l",
                    "cloudloop.io/demo=true",
                    "-o",
                    "jsonpath={.items[*].metadata.labels.topology\\.kubernetes\\.io/zone}",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            return out.split()

        # Node sync initialized the demo nodes from their moto instances.
        while len(demo_zones()) < 2:
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        assert all(zone.startswith("us-east-1") for zone in demo_zones())

        def ingress_hostname() -> str:
            return subprocess.run(
                [
                    *kubectl,
                    "get",
                    "service",
                    "demo-web",
                    "-o",
                    "jsonpath={.status.loadBalancer.ingress[0].hostname}",
                ],
                capture_output=True,
                text=True,
            ).stdout

        # The LB Service got its ELB through its workflow.
        while not ingress_hostname():
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        assert "elb" in ingress_hostname()

        # A Spot interruption injected into the demo's queue drains that node.
        sent = subprocess.run(
            [
                sys.executable,
                "-m",
                "cloudloop.cli",
                "inject",
                "spot-interruption",
                "--state-dir",
                str(state),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        node = sent.split(" for ", 1)[1].split(" ", 1)[0]

        def cordoned() -> bool:
            out = subprocess.run(
                [*kubectl, "get", "node", node, "-o", "jsonpath={.spec.unschedulable}"],
                capture_output=True,
                text=True,
            ).stdout
            return out == "true"

        def drains() -> str:
            return subprocess.run(
                [
                    str(Path(sys.executable).parent / "temporal"),
                    "workflow",
                    "list",
                    "--address",
                    f"127.0.0.1:{temporal_port}",
                    "--query",
                    "WorkflowType='DrainNode' AND ExecutionStatus='Completed'",
                ],
                capture_output=True,
                text=True,
            ).stdout

        while not (cordoned() and f"drain/{node}/" in drains()):
            assert time.monotonic() < deadline + 60, log_path.read_text()
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        code = proc.wait(timeout=60)
    assert code == 0, log_path.read_text()
    assert "every process of the stack has exited" in log_path.read_text()
    assert processes_mentioning(str(state)) == []
