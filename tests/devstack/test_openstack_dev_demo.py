"""``cloudloop dev --provider openstack`` as a user runs it: the emulator's servers become
initialized Nodes with pod routes on the router, the LB Service gets its floating IP, the
CloudProbe answers, the demo node group's 2 machines get their servers and join as Nodes
(the dev stack's kubelet stand-in) with their own pod routes, the Standard layout's
base infrastructure and master VM are made by the ``Layout`` workflow (completed in Temporal),
and Ctrl-C stops everything."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.devstack.dev_process import dev_process

pytestmark = pytest.mark.stack

DEADLINE_S = 180


def test_dev_openstack_demo(tmp_path: Path) -> None:
    with dev_process("openstack", tmp_path, DEADLINE_S) as dev:
        wait_for, get, temporal_port = dev.wait_for, dev.get, dev.temporal_port
        banner = dev.log()
        assert "cloud.conf" in banner and "/v3 (Keystone" in banner
        zones = "jsonpath={.items[*].metadata.labels.topology\\.kubernetes\\.io/zone}"
        wait_for(
            lambda: (
                sorted(get("nodes", "-l", "cloudloop.io/demo=true", "-o", zones).split())
                == ["nova", "nova-b"]
            ),
            "nodes initialized",
        )
        ip = "jsonpath={.status.loadBalancer.ingress[0].ip}"
        wait_for(
            lambda: get("service", "demo-web", "-o", ip).startswith("172.24.4."), "the floating IP"
        )
        ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
        wait_for(lambda: get("cloudprobe", "openstack", "-o", ready) == "True", "the probe")

        admin_url = next(
            line.split(": ", 1)[1].split("/state")[0]
            for line in banner.splitlines()
            if "emulator    :" in line
        )

        def routes() -> int:
            with urllib.request.urlopen(f"{admin_url}/state", timeout=5) as response:
                routers = json.loads(response.read())["routers"]
            return sum(len(r["routes"]) for r in routers)

        wait_for(lambda: routes() >= 2, "the demo nodes' pod routes on router1")

        # Storage through CSI: the claim is Bound to a Cinder volume in its pod's zone and
        # attached to that server (CreateVolume, AttachVolume behind the real sidecars).
        assert "get pvc,volumeattachments" in banner
        wait_for(
            lambda: (
                get("pvc", "demo-data", "-o", "jsonpath={.status.phase}") == "Bound"
                and get("volumeattachments", "-o", "jsonpath={.items[*].status.attached}") == "true"
            ),
            "the demo claim bound and attached",
        )
        pod_node = get("pods", "-l", "app=demo-data", "-o", "jsonpath={.items[0].spec.nodeName}")
        with urllib.request.urlopen(f"{admin_url}/state", timeout=5) as response:
            cloud = json.loads(response.read())
        server_ids = {s["name"]: s["id"] for s in cloud["servers"]}
        [claimed] = [v for v in cloud["volumes"] if v["name"].startswith("pvc-")]
        assert [a["server_id"] for a in claimed["attachments"]] == [server_ids[pod_node]]

        provider_ids = "jsonpath={.items[*].spec.providerID}"
        names = "jsonpath={.items[*].metadata.name}"
        wait_for(
            lambda: (
                len(get("machines", "-n", "demo-capi", "-o", provider_ids).split()) == 2
                and len(get("openstackmachines", "-n", "demo-capi", "-o", provider_ids).split())
                == 2
            ),
            "the node group's 2 machines provisioned",
        )
        with urllib.request.urlopen(f"{admin_url}/state", timeout=5) as response:
            state = json.loads(response.read())
        made = [s for s in state["servers"] if s["name"].startswith("demo-workers-")]
        assert len(made) == 2 and all(s["status"] == "ACTIVE" for s in made), made
        # Their VMs join as Nodes named after the Machines; node sync initializes them (the
        # providerID the Machine has) and route sync gives each its pod route.
        machine_names = sorted(get("machines", "-n", "demo-capi", "-o", names).split())
        wait_for(
            lambda: all(
                get("node", name, "-o", "jsonpath={.spec.providerID}").startswith("openstack://")
                for name in machine_names
            ),
            "the node group's Nodes initialized",
        )
        wait_for(lambda: routes() == 4, "four pod routes: two demo nodes, two node-group nodes")

        # the Standard layout: base infrastructure and one master, by the Layout workflow
        async def layout_status() -> WorkflowExecutionStatus | None:
            client = await Client.connect(f"127.0.0.1:{temporal_port}")
            described = await client.get_workflow_handle("layout/dev-os").describe()
            return described.status

        wait_for(
            lambda: asyncio.run(layout_status()) == WorkflowExecutionStatus.COMPLETED,
            "the layout applied",
        )
        with urllib.request.urlopen(f"{admin_url}/state", timeout=5) as response:
            state = json.loads(response.read())
        [master] = [s for s in state["servers"] if s["name"] == "dev-os-master-0"]
        assert master["status"] == "ACTIVE"
        assert [n["name"] for n in state["networks"] if n["name"] == "dev-os"] == ["dev-os"]
        assert [r["name"] for r in state["routers"] if r["name"] == "dev-os"] == ["dev-os"]
        [data] = [v for v in state["volumes"] if v["name"] == "dev-os-kubernetes-data-0"]
        assert data["attachments"][0]["server_id"] == master["id"]
        assert [f for f in state["floatingips"] if f["description"] == "dev-os-master-0"]
