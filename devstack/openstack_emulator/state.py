"""The whole emulated OpenStack: the services over one :class:`~.cloud.Cloud`, its seed, admin.

:class:`OpenStack` builds Keystone, Nova, Neutron, Octavia, Cinder and Glance over one state,
seeds a devstack-like project (networks ``public``/``private`` with ``router1`` between them,
flavors ``m1.*``, images, volume types, zones) with fixed IDs, and offers what tests need beyond
the APIs: a JSON snapshot, request counts, bulk server seeding and faults. Nothing here speaks
HTTP (:mod:`.server` does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devstack.openstack_emulator.api import Service
from devstack.openstack_emulator.cloud import (
    SERVICES,
    Cloud,
    Delays,
    InjectedFault,
    Resource,
    iso_now,
    seed_id,
)
from devstack.openstack_emulator.compute import Compute
from devstack.openstack_emulator.identity import Identity, IdentityOptions
from devstack.openstack_emulator.image import Image
from devstack.openstack_emulator.loadbalancer import LoadBalancing
from devstack.openstack_emulator.network import Network
from devstack.openstack_emulator.volume import BlockStorage

PUBLIC_NETWORK = "public"
PUBLIC_CIDR = "172.24.4.0/24"
PRIVATE_NETWORK = "private"
PRIVATE_SUBNET = "private-subnet"
PRIVATE_CIDR = "10.0.0.0/16"  # room for a thousand-node cluster
ROUTER = "router1"
#: devstack's flavors: name → (id, vcpus, ram MiB, disk GiB, ephemeral GiB).
FLAVORS = {
    "m1.tiny": ("1", 1, 512, 1, 0),
    "m1.small": ("2", 1, 2048, 20, 0),
    "m1.medium": ("3", 2, 4096, 40, 0),
    "m1.large": ("4", 4, 8192, 80, 0),
    "m1.xlarge": ("5", 8, 16384, 160, 0),
    "c1.local": ("c1", 2, 4096, 20, 10),
}
IMAGES = ("cirros-0.6.2-x86_64-disk", "ubuntu-22.04")
#: Volume types: name → (extra specs, default).
VOLUME_TYPES = {
    "__DEFAULT__": ({}, True),
    "lvmdriver-1": ({"volume_backend_name": "lvmdriver-1"}, False),
    "ssd": ({"volume_backend_name": "ssd", "iops": "3000"}, False),
}


@dataclass(frozen=True)
class EmulatorOptions:
    """Everything about the emulated cloud that a test or ``cloudloop dev`` may choose."""

    identity: IdentityOptions = field(default_factory=IdentityOptions)
    zones: tuple[str, ...] = ("nova", "nova-b")
    delays: Delays = field(default_factory=Delays)
    max_routes: int = 30
    gigabytes_quota: int = 10000
    volumes_quota: int = 1000


@dataclass(frozen=True)
class Seed:
    """IDs of the seeded resources (stable across runs)."""

    project_id: str
    public_network_id: str = seed_id("network", PUBLIC_NETWORK)
    public_subnet_id: str = seed_id("subnet", "public-subnet")
    private_network_id: str = seed_id("network", PRIVATE_NETWORK)
    private_subnet_id: str = seed_id("subnet", PRIVATE_SUBNET)
    router_id: str = seed_id("router", ROUTER)
    image_id: str = seed_id("image", IMAGES[-1])

    def as_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


class OpenStack:
    """All services over one state; the server and the admin API call into this."""

    def __init__(
        self, options: EmulatorOptions, *, clock: Callable[[], float] | None = None
    ) -> None:
        self.options = options
        self.cloud = Cloud(delays=options.delays, **({"clock": clock} if clock else {}))
        self.seed = Seed(project_id=options.identity.project_id)
        self._build()

    def _build(self) -> None:
        options = self.options
        cloud = self.cloud
        self.identity = Identity(cloud, options.identity)
        self.network = Network(cloud, max_routes=options.max_routes)
        self.compute = Compute(cloud, zones=options.zones)
        self.volumes = BlockStorage(
            cloud,
            zones=options.zones,
            gigabytes_quota=options.gigabytes_quota,
            volumes_quota=options.volumes_quota,
        )
        self.load_balancing = LoadBalancing(cloud, zones=options.zones)
        self.image = Image(cloud)
        self.compute.network = self.network
        self.compute.volumes = self.volumes
        self.load_balancing.network = self.network
        self._seed()

    @property
    def services(self) -> dict[str, Service]:
        return {
            "identity": self.identity,
            "compute": self.compute,
            "network": self.network,
            "load-balancer": self.load_balancing,
            "block-storage": self.volumes,
            "image": self.image,
        }

    # -- seed ------------------------------------------------------------------------------
    def _seed(self) -> None:
        project = self.seed.project_id
        net = self.network
        with self.cloud.lock:
            net.default_security_group(project)
            public = net.create_network(
                project, {"name": PUBLIC_NETWORK, "router:external": True, "shared": True}
            )
            self._rekey("networks", public, self.seed.public_network_id)
            self._seed_subnet(public, "public-subnet", PUBLIC_CIDR, self.seed.public_subnet_id)
            private = net.create_network(project, {"name": PRIVATE_NETWORK})
            self._rekey("networks", private, self.seed.private_network_id)
            self._seed_subnet(private, PRIVATE_SUBNET, PRIVATE_CIDR, self.seed.private_subnet_id)
            router = net.create_router(
                project, {"name": ROUTER, "external_gateway_info": {"network_id": public["id"]}}
            )
            self._rekey("routers", router, self.seed.router_id)
            subnet = self.cloud.table("subnets")[self.seed.private_subnet_id]
            port = net.create_port(
                project,
                {
                    "network_id": private["id"],
                    "fixed_ips": [{"subnet_id": subnet["id"], "ip_address": subnet["gateway_ip"]}],
                },
            )
            port.update(
                device_id=router["id"],
                device_owner="network:router_interface",
                status="ACTIVE",
                port_security_enabled=False,
                security_groups=[],
            )
            flavors = self.cloud.table("flavors")
            for name, (flavor_id, vcpus, ram, disk, ephemeral) in FLAVORS.items():
                flavors[flavor_id] = {
                    "id": flavor_id,
                    "name": name,
                    "vcpus": vcpus,
                    "ram": ram,
                    "disk": disk,
                    "OS-FLV-EXT-DATA:ephemeral": ephemeral,
                    "swap": "",
                    "rxtx_factor": 1.0,
                    "os-flavor-access:is_public": True,
                    "OS-FLV-DISABLED:disabled": False,
                    "description": None,
                    "extra_specs": {"hw_rng:allowed": "True"},
                }
            images = self.cloud.table("images")
            for name in IMAGES:
                image_id = seed_id("image", name)
                images[image_id] = {
                    "id": image_id,
                    "name": name,
                    "status": "active",
                    "visibility": "public",
                    "disk_format": "qcow2",
                    "container_format": "bare",
                    "min_disk": 0,
                    "min_ram": 0,
                    "size": 21430272,
                    "protected": False,
                    "owner": project,
                    "tags": [],
                    "created_at": "2024-01-01T00:00:00Z",
                    "updated_at": "2024-01-01T00:00:00Z",
                    "os_hidden": False,
                    "self": f"/v2/images/{image_id}",
                    "file": f"/v2/images/{image_id}/file",
                    "schema": "/v2/schemas/image",
                }
            types = self.cloud.table("volume_types")
            for name, (specs, default) in VOLUME_TYPES.items():
                type_id = seed_id("volume-type", name)
                types[type_id] = {
                    "id": type_id,
                    "name": name,
                    "description": "Default Volume Type" if default else None,
                    "is_public": True,
                    "os-volume-type-access:is_public": True,
                    "extra_specs": dict(specs),
                    "qos_specs_id": None,
                    "_default": default,
                }
            self.cloud.counts.clear()  # the seed is not counted

    def _rekey(self, table: str, item: Resource, new_id: str) -> None:
        rows = self.cloud.table(table)
        rows.pop(item["id"], None)
        item["id"] = new_id
        rows[new_id] = item

    def _seed_subnet(self, network: Resource, name: str, cidr: str, subnet_id: str) -> Resource:
        subnet = self.network.create_subnet(
            self.seed.project_id, {"network_id": network["id"], "name": name, "cidr": cidr}
        )
        network["subnets"].remove(subnet["id"])
        self._rekey("subnets", subnet, subnet_id)
        network["subnets"].append(subnet_id)
        return subnet

    def reset(self) -> None:
        with self.cloud.lock:
            self.cloud.reset_core()
            self.cloud.delays = self.options.delays
            self._build()

    # -- admin operations ------------------------------------------------------------------
    def seed_servers(
        self,
        count: int,
        *,
        prefix: str = "node",
        start: int = 0,
        flavor: str = "m1.small",
        network: str = PRIVATE_NETWORK,
        zones: list[str] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> list[dict[str, str]]:
        """Create ``count`` servers that are ``ACTIVE`` at once (benchmarks, big clusters)."""
        with self.cloud.lock:
            flavor_id = FLAVORS[flavor][0] if flavor in FLAVORS else flavor
            network_id = next(
                n["id"]
                for n in self.cloud.table("networks").values()
                if network in (n["name"], n["id"])
            )
            zones = zones or list(self.options.zones)
            made = []
            for index in range(start, start + count):
                server = self.compute.build_server(
                    self.seed.project_id,
                    self.options.identity.user_id,
                    {
                        "name": f"{prefix}-{index}",
                        "flavorRef": flavor_id,
                        "imageRef": self.seed.image_id,
                        "networks": [{"uuid": network_id}],
                        "availability_zone": zones[index % len(zones)],
                        "metadata": dict(metadata or {}),
                    },
                    build_s=0,
                )
                made.append({"id": server["id"], "name": server["name"]})
            return made

    def find_server(self, ref: str) -> Resource:
        for server in self.cloud.table("servers").values():
            if ref in (server["id"], server["name"]):
                return server
        raise KeyError(ref)

    def force_server_status(self, ref: str, status: str) -> Resource:
        with self.cloud.lock:
            self.cloud.advance()
            server = self.find_server(ref)
            server.update(status=status.upper(), _task_state=None, updated=iso_now())
            return server

    def force_volume_status(self, ref: str, status: str) -> Resource:
        with self.cloud.lock:
            self.cloud.advance()
            for volume in self.cloud.table("volumes").values():
                if ref in (volume["id"], volume["name"]):
                    volume["status"] = status
                    return volume
            raise KeyError(ref)

    def force_lb_status(self, ref: str, status: str) -> Resource:
        with self.cloud.lock:
            self.cloud.advance()
            return self.load_balancing.force_status(ref, status)

    def set_delays(self, changes: dict[str, float]) -> Delays:
        with self.cloud.lock:
            self.cloud.delays = self.cloud.delays.with_changes(changes)
            return self.cloud.delays

    def hold(self, kind: str, held: bool) -> list[str]:
        with self.cloud.lock:
            if held:
                self.cloud.held.add(kind)
            else:
                self.cloud.held.discard(kind)
                self.cloud.advance()
            return sorted(self.cloud.held)

    def set_quotas(self, quotas: dict[str, int]) -> dict[str, int]:
        """Set project quotas by ``<service>.<resource>`` (``compute.instances``,
        ``compute.cores``, ``compute.ram``, ``network.port``, ``volume.volumes``,
        ``volume.gigabytes``); -1 or ``None`` lifts one."""
        with self.cloud.lock:
            for key, value in quotas.items():
                if value is None or int(value) < 0:
                    self.cloud.quotas.pop(key, None)
                else:
                    self.cloud.quotas[key] = int(value)
            return dict(self.cloud.quotas)

    def set_no_valid_host(self, flavor: str, enabled: bool) -> list[str]:
        """Servers of ``flavor`` (name or ID) end in ERROR "No valid host was found"."""
        with self.cloud.lock:
            if enabled:
                self.cloud.no_valid_host.add(flavor)
            else:
                self.cloud.no_valid_host.discard(flavor)
            return sorted(self.cloud.no_valid_host)

    def fail_next(self, kind: str, count: int) -> None:
        with self.cloud.lock:
            self.cloud.fail_next[kind] = count

    def inject(self, fault: InjectedFault) -> None:
        if fault.service not in SERVICES:
            raise ValueError(f"service must be one of {SERVICES}")
        with self.cloud.lock:
            self.cloud.faults.append(fault)

    def clear_faults(self) -> None:
        with self.cloud.lock:
            self.cloud.faults.clear()
            self.cloud.fail_next.clear()
            self.cloud.no_valid_host.clear()
            self.cloud.quotas.clear()
            self.cloud.held.clear()
            self.cloud.hold_triggers.clear()

    # -- snapshot --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-ready data, for the admin API."""
        with self.cloud.lock:
            self.cloud.advance()
            tables = self.cloud.tables

            def rows(name: str) -> list[Resource]:
                return [
                    {
                        k: v
                        for k, v in row.items()
                        if not k.startswith("_")
                        or k
                        in (
                            "_lb_id",
                            "_pool_id",
                            "_default_pool_id",
                            "_monitor_id",
                            "_az",
                            "_flavor_id",
                            "_hints",
                            "_task_state",
                            "_bdm",
                            "_user_data",
                        )
                    }
                    for row in tables.get(name, {}).values()
                ]

            return {
                "seed": self.seed.as_dict(),
                "servers": rows("servers"),
                "networks": rows("networks"),
                "subnets": rows("subnets"),
                "ports": rows("ports"),
                "floatingips": rows("floatingips"),
                "routers": rows("routers"),
                "security_groups": rows("security_groups"),
                "loadbalancers": rows("lb_loadbalancers"),
                "listeners": rows("lb_listeners"),
                "pools": rows("lb_pools"),
                "members": rows("lb_members"),
                "healthmonitors": rows("lb_healthmonitors"),
                "volumes": rows("volumes"),
                "server_groups": rows("server_groups"),
                "keypairs": rows("keypairs"),
                "counts": dict(self.cloud.counts),
                "quotas": dict(self.cloud.quotas),
                "no_valid_host": sorted(self.cloud.no_valid_host),
                "service_modes": dict(self.cloud.service_modes),
                "held": sorted(self.cloud.held),
                "faults": [dict(f.__dict__) for f in self.cloud.faults],
                "pending_transitions": self.cloud.pending_transitions(),
                "request_counts": dict(self.cloud.request_counts),
                "user_agents": dict(self.cloud.user_agents),
                "requests_total": sum(self.cloud.request_counts.values()),
            }
