"""What a layout left in the oVirt Engine emulator: the cluster's VMs and disks (tests, bench).

Rules: read-only, through the emulator's admin API; a VM or disk counts when its name starts with
the cluster's prefix, so a duplicate shows as two entries and a clean destroy as none. A VM's
NICs count as ``Nic/<vm>/<nic>``. :func:`mutating_calls` counts the engine API requests that
change something (every method but GET; the SSO login is not an API request).
"""

from __future__ import annotations

from devstack.ovirt_emulator.admin import OvirtEmulatorAdmin

API = "/ovirt-engine/api"


def cluster_resources(admin_url: str, prefix: str) -> list[str]:
    """``<type>/<name>`` of every VM, NIC and disk of the cluster ``prefix`` (repeats included)."""
    state = OvirtEmulatorAdmin(admin_url).state()
    found: list[str] = []
    for vm in state["vms"]:
        if vm["name"].startswith(f"{prefix}-"):
            found.append(f"VM/{vm['name']}")
            found += [f"Nic/{vm['name']}/{nic['name']}" for nic in vm["nics"]]
    found += [f"Disk/{d['name']}" for d in state["disks"] if d["name"].startswith(f"{prefix}-")]
    return sorted(found)


def mutating_calls(admin_url: str) -> dict[str, int]:
    """Engine API requests so far that are not GETs, by ``"<METHOD> <route>"``."""
    counts = OvirtEmulatorAdmin(admin_url).request_counts()
    return {
        k: v
        for k, v in counts.items()
        if not k.startswith("GET ") and k.split(" ", 1)[1].startswith(API)
    }


def api_calls(admin_url: str) -> int:
    """Engine API requests so far (every method)."""
    counts = OvirtEmulatorAdmin(admin_url).request_counts()
    return sum(v for k, v in counts.items() if k.split(" ", 1)[1].startswith(API))
