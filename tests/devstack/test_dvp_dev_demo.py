"""``cloudloop dev --provider dvp`` as a user runs it: the parent's VMs become initialized Nodes
(providerID ``dvp://<vm>``), the LB Service gets the parent Service's ingress, the CloudProbe
answers, the demo node group's 2 machines get their VMs in the parent and join as Nodes, the
Standard layout's master VM and disks are made in the parent namespace, and Ctrl-C stops
everything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.devstack.dev_process import dev_process

pytestmark = pytest.mark.stack

DEADLINE_S = 180


def test_dev_dvp_demo(tmp_path: Path) -> None:
    with dev_process("dvp", tmp_path, DEADLINE_S) as dev:
        wait_for, get = dev.wait_for, dev.get
        banner = dev.log()
        assert "DVP parent  :" in banner

        def parent(kind: str) -> list[dict[str, Any]]:
            found = get(kind, "-n", "demo-dvp", "-o", "json", cluster="parent")
            items: list[dict[str, Any]] = json.loads(found or '{"items": []}')["items"]
            return items

        provider_ids = "jsonpath={.items[*].spec.providerID}"
        wait_for(
            lambda: (
                sorted(get("nodes", "-l", "cloudloop.io/demo=true", "-o", provider_ids).split())
                == ["dvp://demo-node-0", "dvp://demo-node-1"]
            ),
            "the demo nodes initialized",
        )
        ip = "jsonpath={.status.loadBalancer.ingress[0].ip}"
        wait_for(lambda: get("service", "demo-web", "-o", ip) != "", "the LB's ingress")
        assert any(s["spec"]["type"] == "LoadBalancer" for s in parent("services"))
        ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
        wait_for(lambda: get("cloudprobe", "dvp", "-o", ready) == "True", "the probe")

        # Storage through CSI: the claim is Bound (CreateVolume) and attached (AttachVolume).
        assert "get pvc,volumeattachments" in banner
        claim = "jsonpath={.status.phase}"
        attached = "jsonpath={.items[*].status.attached}"
        wait_for(
            lambda: (
                get("pvc", "demo-data", "-o", claim) == "Bound"
                and get("volumeattachments", "-o", attached) == "true"
            ),
            "the demo claim bound and attached",
        )

        wait_for(
            lambda: (
                len(get("machines", "-n", "demo-capi", "-o", provider_ids).split()) == 2
                and len(get("deckhousemachines", "-n", "demo-capi", "-o", provider_ids).split())
                == 2
            ),
            "the node group's 2 machines provisioned",
        )
        names = "jsonpath={.items[*].metadata.name}"
        machine_names = sorted(get("machines", "-n", "demo-capi", "-o", names).split())
        vms = {vm["metadata"]["name"] for vm in parent("virtualmachines")}
        assert set(machine_names) <= vms, (machine_names, vms)
        wait_for(
            lambda: all(
                get("node", name, "-o", "jsonpath={.spec.providerID}").startswith("dvp://")
                for name in machine_names
            ),
            "the node group's Nodes initialized",
        )

        # The Standard layout: one master VM (``<prefix>-master-0-<suffix>``, as upstream's
        # module names it) with its root and etcd disks in the parent.
        def master_phase() -> str:
            prefix = "dev-layout-master-0-"
            found = [
                vm for vm in parent("virtualmachines") if vm["metadata"]["name"].startswith(prefix)
            ]
            return str(found[0].get("status", {}).get("phase", "")) if found else ""

        wait_for(lambda: master_phase() == "Running", "the layout's master")
        disks = [d["metadata"]["name"] for d in parent("virtualdisks")]
        assert any("kubernetes-data" in d for d in disks), disks
