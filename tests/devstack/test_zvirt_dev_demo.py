"""``cloudloop dev --provider zvirt`` as a user runs it: the emulator's VMs become initialized
Nodes (providerID ``zvirt://<vm id>``, the guest's addresses), the CloudProbe answers, the demo
node group's 2 machines get their VMs and join as Nodes, the Standard layout's master VM and data
disk are made by the layout apply, and Ctrl-C stops everything."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.devstack.dev_process import dev_process

pytestmark = pytest.mark.stack

DEADLINE_S = 180


def test_dev_zvirt_demo(tmp_path: Path) -> None:
    with dev_process("zvirt", tmp_path, DEADLINE_S) as dev:
        wait_for, get = dev.wait_for, dev.get
        banner = dev.log()
        assert "oVirt Engine API" in banner
        assert "dev-zvirt" not in banner  # the password is named by its file, never printed
        admin_url = next(
            line.split(": ", 1)[1].split("/state")[0]
            for line in banner.splitlines()
            if "emulator    :" in line
        )

        def engine() -> dict[str, Any]:
            with urllib.request.urlopen(f"{admin_url}/state", timeout=5) as response:
                found: dict[str, Any] = json.loads(response.read())
            return found

        vm_ids = {vm["name"]: vm["id"] for vm in engine()["vms"]}
        provider_ids = "jsonpath={.items[*].spec.providerID}"
        wait_for(
            lambda: (
                sorted(get("nodes", "-l", "cloudloop.io/demo=true", "-o", provider_ids).split())
                == sorted(f"zvirt://{vm_ids[n]}" for n in ("demo-node-0", "demo-node-1"))
            ),
            "the demo nodes initialized",
        )
        addresses = get("node", "demo-node-0", "-o", "jsonpath={.status.addresses[*].type}")
        assert "InternalIP" in addresses.split(), addresses
        ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
        wait_for(lambda: get("cloudprobe", "zvirt", "-o", ready) == "True", "the probe")

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
                and len(get("zvirtmachines", "-n", "demo-capi", "-o", provider_ids).split()) == 2
            ),
            "the node group's 2 machines provisioned",
        )
        made = [vm for vm in engine()["vms"] if vm["name"].startswith("demo-workers-")]
        assert len(made) == 2 and all(vm["status"] == "up" for vm in made), made
        # Their VMs join as Nodes named after the Machines; node sync initializes them.
        names = "jsonpath={.items[*].metadata.name}"
        machine_names = sorted(get("machines", "-n", "demo-capi", "-o", names).split())
        wait_for(
            lambda: all(
                get("node", name, "-o", "jsonpath={.spec.providerID}").startswith("zvirt://")
                for name in machine_names
            ),
            "the node group's Nodes initialized",
        )

        # The Standard layout: one master VM cloned from the template, with its data disk.
        def master() -> list[dict[str, Any]]:
            return [vm for vm in engine()["vms"] if vm["name"] == "dev-layout-master-0"]

        wait_for(lambda: [vm["status"] for vm in master()] == ["up"], "the layout's master")
        [vm] = master()
        disks = [d["name"] for d in engine()["disks"] if d["name"].startswith("dev-layout-")]
        assert any("kubernetes-data" in d for d in disks), disks
        assert len(vm["disk_attachments"]) == 2, vm
