"""The DVP simulator in a process of its own (``DvpParent.start(apart=True)``, the benchmarks').

The emulated cloud runs beside the process under measurement, as a real one would: VMs made in
the parent cluster run, and stopping the parent stops the simulator's process.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cloudloop.cloud.dvp import resources as dvp
from devstack.backends.dvp import create_node_vms
from devstack.dvp_simulator import DvpParent

pytestmark = pytest.mark.stack


def test_vms_run_under_a_simulator_in_its_own_process(tmp_path: Path) -> None:
    parent = DvpParent.start(tmp_path, apart=True)
    try:
        assert parent.process is not None and parent.process.running
        namespace = parent.new_namespace("apart")
        create_node_vms(parent, namespace, {"app": "apart"}, ["vm-apart"])

        deadline = time.monotonic() + 60
        phase = ""
        while time.monotonic() < deadline and phase != "Running":
            vm = parent.kube.get(dvp.VIRTUAL_MACHINES, "vm-apart", namespace) or {}
            phase = str((vm.get("status") or {}).get("phase") or "")
            time.sleep(0.1)

        assert phase == "Running"
        with pytest.raises(RuntimeError, match="process of its own"):
            parent.simulator.hold("vm-start")
    finally:
        parent.stop()
    assert parent.process is not None and not parent.process.running
