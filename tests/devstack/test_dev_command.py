"""README command 1 as a user runs it: `cloudloop dev` is up, shows the demo, Ctrl-C cleans up."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import ssl
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


@pytest.mark.timeout(600)  # CI runners took longer than 300 s for the whole start
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
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 480  # stack start and probe, on a loaded machine
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

        # The workers are processes of their own, as the chart runs them: one SIGKILLed is
        # started again, and the demo below goes on on the workers that are up.
        [pids] = re.findall(r"workers +: 2 processes \(PIDs ([0-9, ]+)\)", banner)
        workers = [int(pid) for pid in pids.split(", ")]
        os.kill(workers[0], signal.SIGKILL)
        while "worker-0 started again" not in log_path.read_text():
            assert time.monotonic() < deadline + 60, log_path.read_text()
            time.sleep(0.2)

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

        def group_machines() -> list[str]:
            """The NodeGroup's Ready status, then its Machines' providerIDs."""
            ready = subprocess.run(
                [*kubectl, "get", "nodegroup", "demo-workers", "-o",
                 "jsonpath={.status.conditions[?(@.type=='Ready')].status}"],
                capture_output=True, text=True,
            ).stdout  # fmt: skip
            ids = subprocess.run(
                [*kubectl, "get", "machines", "-l", "node-group=demo-workers", "-o",
                 "jsonpath={.items[*].spec.providerID}"],
                capture_output=True, text=True,
            ).stdout.split()  # fmt: skip
            return [ready, *ids]

        # The starter rendered the NodeGroup; its 2 Machines launched their instances.
        while len(made := group_machines()) < 3 or made[0] != "True":
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        assert all(pid.startswith("aws:///us-east-1") for pid in made[1:]), made
        # The layout base's discovery document is there: the merged one satisfies the schema.
        assert "does not satisfy Deckhouse's schema" not in log_path.read_text()

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

        # Storage: the CSI controller behind the real sidecars bound the demo's claim to an EBS
        # volume (a CreateVolume workflow) and attached it to the pod's Node (AttachVolume).
        assert "get pvc,volumeattachments" in banner

        def claim() -> tuple[str, str]:
            out = subprocess.run(
                [
                    *kubectl,
                    "get",
                    "pvc",
                    "demo-data",
                    "-o",
                    "jsonpath={.status.phase} {.spec.volumeName}",
                ],
                capture_output=True,
                text=True,
            ).stdout.split()
            return (out[0], out[1]) if len(out) == 2 else ("", "")

        def completed_workflows(kind: str) -> str:
            return subprocess.run(
                [
                    str(Path(sys.executable).parent / "temporal"),
                    "workflow",
                    "list",
                    "--address",
                    f"127.0.0.1:{temporal_port}",
                    "--query",
                    f"WorkflowType='{kind}' AND ExecutionStatus='Completed'",
                ],
                capture_output=True,
                text=True,
            ).stdout

        def attached() -> str:
            return subprocess.run(
                [
                    *kubectl,
                    "get",
                    "volumeattachments",
                    "-o",
                    "jsonpath={.items[*].status.attached}",
                ],
                capture_output=True,
                text=True,
            ).stdout

        while not (
            claim()[0] == "Bound"
            and "CreateVolume" in completed_workflows("CreateVolume")
            and attached() == "true"
        ):
            assert time.monotonic() < deadline + 60, log_path.read_text()
            time.sleep(0.5)
        volume_handle = subprocess.run(
            [*kubectl, "get", "pv", claim()[1], "-o", "jsonpath={.spec.csi.volumeHandle}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert volume_handle.startswith("vol-"), volume_handle
        assert "AttachVolume" in completed_workflows("AttachVolume")

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

        # The demo layout applied, and one pass of its converge Schedule in the UI's list.
        while "LayoutConverge" not in completed_workflows("LayoutConverge"):
            assert time.monotonic() < deadline + 60, log_path.read_text()
            time.sleep(0.5)
        assert "demo layout dev-layout applied" in log_path.read_text()
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        code = proc.wait(timeout=60)
    assert code == 0, log_path.read_text()
    assert "every process of the stack has exited" in log_path.read_text()
    assert processes_mentioning(str(state)) == []
    assert not [pid for pid in workers[1:] if Path(f"/proc/{pid}").exists()]


def test_dev_vsphere_demo(tmp_path: Path) -> None:
    """``cloudloop dev --provider vsphere``: vcsim VMs in two tagged zones become initialized
    Nodes with zone labels, the demo claim is bound to a disk in its pod's zone and attached
    through CSI, and the demo node group's 2 machines get their VMs."""
    from cloudloop.cloud.vsphere.driver import VsphereDriver
    from cloudloop.cloud.vsphere.settings import VsphereSettings

    state = tmp_path / "dev-state"
    log_path = tmp_path / "dev.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cloudloop.cli",
                "dev",
                "--provider",
                "vsphere",
                "--state-dir",
                str(state),
                "--temporal-port",
                str(free_port()),
                "--ui-port",
                str(free_port()),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "cloudloop dev is up (vsphere" not in log_path.read_text():
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        kubeconfig = state / "kube" / "main" / "admin.kubeconfig"
        kubectl = [str(gotools.binary_path("kubectl")), "--kubeconfig", str(kubeconfig)]

        def initialized() -> dict[str, tuple[str, ...]]:
            out = subprocess.run(
                [*kubectl, "get", "nodes", "-l", "cloudloop.io/demo=true", "-o", "json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            found: dict[str, tuple[str, ...]] = {}
            for node in json.loads(out)["items"]:
                labels = node["metadata"]["labels"]
                if node["spec"].get("providerID") and not node["spec"].get("taints"):
                    found[node["metadata"]["name"]] = (
                        node["spec"]["providerID"],
                        labels.get("topology.kubernetes.io/zone", ""),
                        labels.get("failure-domain.beta.kubernetes.io/zone", ""),
                        labels.get("topology.kubernetes.io/region", ""),
                        labels.get("node.kubernetes.io/instance-type", ""),
                    )
            return found

        while len(initialized()) < 2:
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        nodes = initialized()
        shape = "vsphere-vm.cpu-2.mem-4gb.os-ubuntu"
        assert {n: v[1:] for n, v in nodes.items()} == {
            "demo-node-a": ("zone-a", "zone-a", "region-a", shape),
            "demo-node-b": ("zone-b", "zone-b", "region-a", shape),
        }
        assert all(v[0].startswith("vsphere://") for v in nodes.values())

        # Storage through CSI: the claim is Bound to a first-class disk and attached to its
        # pod's node (CreateVolume, AttachVolume workflows behind the real sidecars).
        def get(*args: str) -> str:
            return subprocess.run([*kubectl, "get", *args], capture_output=True, text=True).stdout

        while not (
            get("pvc", "demo-data", "-o", "jsonpath={.status.phase}") == "Bound"
            and get("volumeattachments", "-o", "jsonpath={.items[*].status.attached}") == "true"
        ):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline + 60, log_path.read_text()
            time.sleep(0.5)
        pv = get("pvc", "demo-data", "-o", "jsonpath={.spec.volumeName}")
        volume_id = get("pv", pv, "-o", "jsonpath={.spec.csi.volumeHandle}")
        pod_node = get("pods", "-l", "app=demo-data", "-o", "jsonpath={.items[0].spec.nodeName}")

        # The disk, read back from vcsim: in its pod's zone, consumed by that node's VM only.
        server = json.loads((state / "stack.json").read_text())["vcsim_url"]
        host, port = server.removeprefix("https://").rsplit(":", 1)
        fingerprint = hashlib.sha1(
            ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate((host, int(port))))
        ).hexdigest()
        driver = VsphereDriver(
            VsphereSettings(
                server=f"{host}:{port}",
                username="k8s-admin",
                password_file=state / "vcsim" / "password",
                thumbprint=fingerprint,
            )
        )
        try:
            disk = driver.volumes.get_volume(volume_id)
        finally:
            driver.close()
        uuid = nodes[pod_node][0].removeprefix("vsphere://")
        assert (disk.zone, disk.attached_to, disk.name) == (nodes[pod_node][1], [uuid], pv)

        # The demo node group: 2 Machines, each with its vcsim VM (Machine workflows).
        def provisioned() -> list[str]:
            out = subprocess.run(
                [*kubectl, "-n", "default", "get", "machines", "-o", "json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            return [
                m["spec"]["providerID"]
                for m in json.loads(out)["items"]
                if (m.get("status") or {}).get("phase") in ("Provisioned", "Running")
                and (m.get("spec") or {}).get("providerID", "").startswith("vsphere://")
            ]

        while len(provisioned()) < 2:
            assert time.monotonic() < deadline + 120, log_path.read_text()
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        code = proc.wait(timeout=60)
    assert code == 0, log_path.read_text()
    assert "every process of the stack has exited" in log_path.read_text()
    assert processes_mentioning(str(state)) == []
