"""What a layout left in the OpenStack emulator: every resource of a cluster (tests, bench).

Rules: read-only (the admin API's snapshot); a resource counts when its name starts with the
cluster's prefix (a floating IP: its description, the node's name the layout gives it), so a
duplicate shows as two entries and a clean destroy as none. Security group rules go with their
group and are not listed; servers being deleted still count (they are not gone yet).
"""

from __future__ import annotations

from devstack.openstack_emulator import OpenStackEmulatorAdmin

#: Snapshot table → the name a resource is listed under.
_TABLES = {
    "networks": "Network",
    "subnets": "Subnet",
    "routers": "Router",
    "ports": "Port",
    "security_groups": "SecurityGroup",
    "servers": "Server",
    "volumes": "Volume",
    "server_groups": "ServerGroup",
    "keypairs": "Keypair",
}


def cluster_resources(admin_url: str, prefix: str) -> list[str]:
    """``<type>/<name>`` of every resource of the cluster ``prefix`` (repeats included)."""
    state = OpenStackEmulatorAdmin(admin_url).state()
    found: list[str] = []
    for table, kind in _TABLES.items():
        for row in state.get(table) or []:
            name = str(row.get("name") or "")
            if name.startswith(prefix):
                found.append(f"{kind}/{name}")
    for fip in state.get("floatingips") or []:
        description = str(fip.get("description") or "")
        if description.startswith(prefix):
            found.append(f"FloatingIP/{description}")
    return sorted(found)
