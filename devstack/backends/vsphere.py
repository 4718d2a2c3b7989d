"""vSphere on vcsim (govmomi's simulator): vcsim alone, and the driver's settings for it.

Rules: every user starts its own vcsim (module or session scope); inventory seeding (node VMs,
zone tags) is :mod:`devstack.vcsim_inventory`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from cloudloop.cloud.vsphere.settings import VsphereSettings
from devstack.backends import emulator_only
from devstack.vcsim import VcsimEndpoint, VcsimOptions


@contextmanager
def vcsim_server(state_dir: Path, options: VcsimOptions | None = None) -> Iterator[VcsimEndpoint]:
    """vcsim alone (its default inventory unless ``options`` say otherwise)."""
    with emulator_only(state_dir, vcsim=options or VcsimOptions()) as local:
        assert local.vcsim is not None
        yield local.vcsim


def vsphere_settings(endpoint: VcsimEndpoint, **overrides: Any) -> VsphereSettings:
    """The driver's settings for vcsim (its CA and credentials); ``overrides`` set any other
    field (region and zones, timeouts, polling)."""
    values: dict[str, Any] = {
        "server": endpoint.server,
        "username": endpoint.username,
        "password": SecretStr(endpoint.password),
        "ca_bundle": endpoint.ca_file,
    }
    values.update(overrides)
    return VsphereSettings(**values)


#: vcsim's default inventory: the VM node-group machines are cloned from, and the network
#: (``-pg 0`` puts every NIC on the standard network ``VM Network``).
TEMPLATE = "DC0_C0_RP0_VM0"
NETWORK = "VM Network"
#: Driver timings for tests: short polls, a task wait well under an activity's timeout.
QUICK_TIMINGS: dict[str, float] = {"poll_interval_s": 0.05, "wait_timeout_s": 30.0}


def instance_class_spec(**fields: Any) -> dict[str, Any]:
    """A VsphereInstanceClass spec for vcsim's default inventory (1 vCPU, 1 GiB, 20 GiB disk);
    ``fields`` add or replace spec fields."""
    return {
        "numCPUs": 1,
        "memory": 1024,
        "rootDiskSize": 20,
        "template": TEMPLATE,
        "mainNetwork": NETWORK,
        **fields,
    }


def machine_spec(**fields: Any) -> dict[str, Any]:
    """A VSphereMachine spec cloning vcsim's first VM onto ``VM Network``; ``fields`` add or
    replace spec fields."""
    return {
        "template": TEMPLATE,
        "cloneMode": "fullClone",
        "numCPUs": 1,
        "memoryMiB": 1024,
        "diskGiB": 20,
        "network": {"devices": [{"networkName": NETWORK, "dhcp4": True}]},
        **fields,
    }
