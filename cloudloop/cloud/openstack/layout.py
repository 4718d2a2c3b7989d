"""OpenStack layouts ``Standard``, ``StandardWithNoRouter``, ``Simple`` and
``SimpleWithInternalNetwork`` as definitions (Deckhouse ``candi/layouts``).

:func:`define` turns a validated ``OpenStackClusterConfiguration`` into the resources of
``base-infrastructure``, one ``master-node`` per replica and one ``static-node`` per node group
index, with the reference's names, metadata and outputs, and the ``OpenStackCloudDiscoveryData``
template. :mod:`cloudloop.cloud.openstack.layout_resources` acts on them.
What is made, and the departures from Terraform: docs/decisions/0048-openstack-layouts.md.

Rules:
- Zones: ``zones`` ∩ the compute zones; a master's zone is
  ``sorted(keys(volumeTypeMap) ∩ zones)[i mod n]``, a static node's the same over its group's.
- Every port has a name and is found by (name, network): definition name ``<port>@<network>``;
  a floating IP is found by (description = the node's name, floating network): ``<node>@<pool>``.
- Lookups (images, flavors, existing networks and security groups) run first, alone, in the base.
- Security group rules are one authoritative resource per group; egress is left to Neutron.
- A root volume is its own resource (not ``delete_on_termination``), deleted after its server.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from cloudloop.layouts.bootstrap import MASTERS
from cloudloop.layouts.config import (
    ClusterIdentity,
    OpenStackClusterConfiguration,
    OpenStackNodeGroup,
)
from cloudloop.layouts.model import (
    LayoutDef,
    LayoutError,
    ModuleDef,
    ResourceDef,
    ref,
    resource_key,
)

LAYOUTS = ("Standard", "StandardWithNoRouter", "Simple", "SimpleWithInternalNetwork")
DISCOVERY_API_VERSION = "deckhouse.io/v1"
DISCOVERY_KIND = "OpenStackCloudDiscoveryData"
DATA_DESCRIPTION = "volume for etcd and kubernetes certs"
DEFAULT_BASTION_ROOT_GB = 50
SECURED = "DirectRoutingWithPortSecurityEnabled"

NETWORK = "openstack.network"
SUBNET = "openstack.subnet"
ROUTER = "openstack.router"
INTERFACE = "openstack.router_interface"
SG = "openstack.security_group"
SG_RULES = "openstack.security_group_rules"
KEYPAIR = "openstack.keypair"
SERVER_GROUP = "openstack.server_group"
IMAGE = "openstack.image"
FLAVOR = "openstack.flavor"
PORT = "openstack.port"
VOLUME = "openstack.volume"
ATTACHMENT = "openstack.volume_attachment"
SERVER = "openstack.server"
FLOATING_IP = "openstack.floating_ip"


def _refs(resource: ResourceDef) -> bool:
    return "$ref" in str(resource.properties)


def host(cidr: str, index: int) -> str:
    """Terraform's ``cidrhost(cidr, index)``."""
    network = ipaddress.ip_network(cidr, strict=False)
    return str(network.network_address + index)


def _rule(
    protocol: str | None, *, cidr: str = "", group: Any = None, ports: tuple[int, int] | None = None
) -> dict[str, Any]:
    rule: dict[str, Any] = {"direction": "ingress", "ethertype": "IPv4", "protocol": protocol}
    rule["port_range_min"], rule["port_range_max"] = ports if ports else (None, None)
    if group is not None:
        rule["remote_group_id"] = group
    else:
        rule["remote_ip_prefix"] = cidr
    return rule


class _Builder:
    def __init__(
        self, config: OpenStackClusterConfiguration, cluster: ClusterIdentity, zones: list[str]
    ):
        self.c = config
        self.p = cluster.prefix
        self.pod_cidr = cluster.pod_subnet_cidr
        self.layout = config.layout
        available = sorted(set(zones))
        wanted = sorted(set(available) & set(config.zones)) if config.zones else available
        if not wanted:
            raise LayoutError(f"none of zones {config.zones} is a compute zone ({available})")
        self.zones = wanted
        self.tags = dict(config.tags)
        self.base_resources: list[ResourceDef] = []
        self._looked_up: set[str] = set()
        std, nr = config.standard, config.standardWithNoRouter
        simple, swin = config.simple, config.simpleWithInternalNetwork
        if self.layout == "Standard" and std is not None:
            self.external: str | None = std.externalNetworkName
            self.security = std.internalNetworkSecurity
            self.dhcp = True
        elif self.layout == "StandardWithNoRouter" and nr is not None:
            self.external = nr.externalNetworkName
            self.security = nr.internalNetworkSecurity
            self.dhcp = nr.externalNetworkDHCP
        elif self.layout == "Simple" and simple is not None:
            self.external = simple.externalNetworkName
            self.security = False
            self.dhcp = simple.externalNetworkDHCP
        elif self.layout == "SimpleWithInternalNetwork" and swin is not None:
            self.external = swin.externalNetworkName or None
            self.security = False
            self.dhcp = swin.externalNetworkDHCP
        else:
            raise LayoutError(f"layout {self.layout}: its section is missing")
        self.bastion = std.bastion if self.layout == "Standard" and std is not None else None
        group = config.masterNodeGroup.serverGroup
        self.server_group: Any = None
        if group is not None and group.policy == "AntiAffinity":
            self.server_group = ref(resource_key(SERVER_GROUP, self.p))
        elif group is not None and group.manuallyManaged is not None:
            self.server_group = group.manuallyManaged.id

    # -- lookups (in the base) -------------------------------------------------------------
    def _lookup(self, kind: str, name: str, properties: dict[str, Any], outputs: list[str]) -> str:
        key = resource_key(kind, name)
        if key not in self._looked_up:
            self._looked_up.add(key)
            self.base_resources.append(
                ResourceDef(
                    kind=kind, name=name, properties=properties, outputs=outputs, read_only=True
                )
            )
        return key

    def image(self, name: str) -> Any:
        return ref(self._lookup(IMAGE, name, {"name": name}, ["id", "name"]))

    def flavor(self, name: str) -> Any:
        return ref(self._lookup(FLAVOR, name, {"name": name}, ["id", "name"]))

    @property
    def own_network(self) -> bool:
        return self.layout in ("Standard", "StandardWithNoRouter")

    def network(self, name: str) -> str:
        """The key of the network ``name``: the layout's own, or a lookup."""
        if self.own_network and name == self.p:
            return resource_key(NETWORK, self.p)
        return self._lookup(NETWORK, name, {"name": name}, ["id", "name"])

    def group(self, name: str) -> Any:
        if self.security and name == self.p:
            return ref(resource_key(SG, self.p))
        return ref(self._lookup(SG, name, {"name": name}, ["id", "name"]))

    @property
    def internal_network(self) -> str:
        """The key of the network the nodes' internal addresses are on."""
        swin = self.c.simpleWithInternalNetwork
        if self.layout == "SimpleWithInternalNetwork" and swin is not None:
            return resource_key(NETWORK, swin.internalSubnetName)
        if self.layout == "Simple":
            assert self.external is not None
            return self.network(self.external)
        return resource_key(NETWORK, self.p)

    # -- base-infrastructure ---------------------------------------------------------------
    def base(self) -> ModuleDef:
        p, c = self.p, self.c
        own: list[ResourceDef] = []
        if self.external:
            self.network(self.external)
        if self.layout == "SimpleWithInternalNetwork":
            assert c.simpleWithInternalNetwork is not None
            subnet = c.simpleWithInternalNetwork.internalSubnetName
            self.base_resources.append(
                ResourceDef(
                    kind=SUBNET,
                    name=subnet,
                    properties={"name": subnet},
                    outputs=["id", "network_id", "cidr"],
                    read_only=True,
                )
            )
            self.base_resources.append(
                ResourceDef(
                    kind=NETWORK,
                    name=subnet,
                    properties={"network_id": ref(resource_key(SUBNET, subnet), "network_id")},
                    outputs=["id", "name"],
                    read_only=True,
                )
            )
        if self.security:
            own += self._security_group()
        own.append(
            ResourceDef(
                kind=KEYPAIR,
                name=p,
                properties={"public_key": c.sshPublicKey.strip()},
                outputs=["id", "name"],
            )
        )
        if self.own_network:
            own += self._network()
        if self.server_group is not None and isinstance(self.server_group, dict):
            own.append(
                ResourceDef(kind=SERVER_GROUP, name=p, properties={"policy": "anti-affinity"})
            )
        outputs: dict[str, Any] = {}
        if self.bastion is not None:
            own += self._bastion()
            outputs["bastion_ip_address_for_ssh"] = ref(
                resource_key(FLOATING_IP, f"{p}-bastion@{self.external}"), "address"
            )
        return ModuleDef(id="base", module="base-infrastructure", resources=own, outputs=outputs)

    def _security_group(self) -> list[ResourceDef]:
        group = ref(resource_key(SG, self.p))
        ingress = [_rule("tcp", cidr=c, ports=(22, 22)) for c in self.c.sshAllowList]
        ingress += [
            _rule("icmp", cidr="0.0.0.0/0"),
            _rule("tcp", cidr="0.0.0.0/0", ports=(30000, 32767)),
            _rule(None, group=group),
        ]
        return [
            ResourceDef(kind=SG, name=self.p, properties={"description": ""}),
            ResourceDef(
                kind=SG_RULES, name=self.p, properties={"group_id": group, "ingress": ingress}
            ),
        ]

    def _network(self) -> list[ResourceDef]:
        p = self.p
        network = resource_key(NETWORK, p)
        resources = [
            ResourceDef(
                kind=NETWORK, name=p, properties={"admin_state_up": True}, outputs=["id", "name"]
            )
        ]
        if self.layout == "Standard":
            std = self.c.standard
            assert std is not None
            cidr = std.internalNetworkCIDR
            subnet: dict[str, Any] = {
                "network_id": ref(network),
                "cidr": cidr,
                "ip_version": 4,
                "gateway_ip": host(cidr, 1),
                "enable_dhcp": True,
                "allocation_pools": [{"start": host(cidr, 2), "end": host(cidr, 254)}],
                "dns_nameservers": list(std.internalNetworkDNSServers),
            }
        else:
            nr = self.c.standardWithNoRouter
            assert nr is not None
            subnet = {
                "network_id": ref(network),
                "cidr": nr.internalNetworkCIDR,
                "ip_version": 4,
                "gateway_ip": None,
            }
        resources.append(
            ResourceDef(
                kind=SUBNET, name=p, properties=subnet, outputs=["id", "network_id", "cidr"]
            )
        )
        if self.layout == "Standard":
            assert self.external is not None
            resources += [
                ResourceDef(
                    kind=ROUTER,
                    name=p,
                    properties={"external_network_id": ref(self.network(self.external))},
                ),
                ResourceDef(
                    kind=INTERFACE,
                    name=p,
                    properties={
                        "router_id": ref(resource_key(ROUTER, p)),
                        "subnet_id": ref(resource_key(SUBNET, p)),
                    },
                ),
            ]
        return resources

    def _bastion(self) -> list[ResourceDef]:
        assert self.bastion is not None and self.external is not None
        klass = self.bastion.instanceClass
        if klass is None:
            raise LayoutError("standard.bastion.instanceClass (flavorName, imageName) is required")
        name = f"{self.p}-bastion"
        zone = self.bastion.zone or self.zones[0]
        metadata = {**self.tags, **klass.additionalTags}
        port = self._port(name, self.network(self.p), subnet=ref(resource_key(SUBNET, self.p)))
        root = ResourceDef(
            kind=VOLUME,
            name=f"{name}-root-volume",
            properties={
                "size": klass.rootDiskSize,
                "image_id": self.image(
                    klass.imageName or self.c.masterNodeGroup.instanceClass.imageName
                ),
                "volume_type": self.bastion.volumeType,
                "availability_zone": zone,
                "metadata": metadata,
            },
            outputs=["id"],
        )
        server = ResourceDef(
            kind=SERVER,
            name=name,
            properties={
                "flavor_id": self.flavor(klass.flavorName),
                "flavor_name": klass.flavorName,
                "key_name": self.p,
                "availability_zone": zone,
                "config_drive": False,
                "ports": [ref(port.key)],
                "root_volume_id": ref(root.key),
                "metadata": metadata,
            },
            depends_on=[resource_key(INTERFACE, self.p), resource_key(KEYPAIR, self.p)],
            outputs=["id", "ip"],
        )
        return [port, root, server, self._floating_ip(name, self.external, port.key)]

    # -- shared node parts -----------------------------------------------------------------
    def _port(
        self,
        name: str,
        network: str,
        *,
        subnet: Any = None,
        groups: list[Any] | None = None,
        pairs: list[str] | None = None,
    ) -> ResourceDef:
        network_name = network.split("/", 1)[1]
        properties: dict[str, Any] = {"port_name": name, "network_id": ref(network)}
        if subnet is not None:
            properties["subnet_id"] = subnet
        if groups is not None:
            properties["security_group_ids"] = groups
        if pairs is not None:
            properties["allowed_address_pairs"] = pairs
        depends = [resource_key(INTERFACE, self.p)] if self.layout == "Standard" and subnet else []
        return ResourceDef(
            kind=PORT,
            name=f"{name}@{network_name}",
            properties=properties,
            depends_on=depends,
            outputs=["id", "ip"],
        )

    def _floating_ip(self, node: str, pool: str, port: str) -> ResourceDef:
        return ResourceDef(
            kind=FLOATING_IP,
            name=f"{node}@{pool}",
            properties={
                "description": node,
                "floating_network_id": ref(self.network(pool)),
                "port_id": ref(port),
            },
            outputs=["id", "address"],
        )

    def _zone(self, index: int, volume_types: dict[str, str], zones: list[str], what: str) -> str:
        candidates = sorted(set(volume_types) & set(zones)) if volume_types else sorted(zones)
        if not candidates:
            raise LayoutError(f"{what}: no zone of {sorted(volume_types)} is one of {zones}")
        return candidates[index % len(candidates)]

    # -- master-node -----------------------------------------------------------------------
    def master(self, index: int) -> ModuleDef:
        p, group = self.p, self.c.masterNodeGroup
        klass = group.instanceClass
        name = f"{p}-master-{index}"
        zone = self._zone(index, group.volumeTypeMap, self.zones, "masterNodeGroup.volumeTypeMap")
        volume_type = group.volumeTypeMap[zone]
        metadata = {**self.tags, **klass.additionalTags}
        resources: list[ResourceDef] = []
        extra_groups = [self.group(g) for g in klass.additionalSecurityGroups]
        ports: list[ResourceDef] = []
        networks: list[Any] = []
        security_groups: list[str] = []
        internal: Any = None
        if self.layout in ("Standard", "StandardWithNoRouter"):
            groups = [ref(resource_key(SG, p)), *extra_groups] if self.security else None
            pairs = [self.pod_cidr] if self.security else None
            if self.layout == "StandardWithNoRouter":
                assert self.external is not None
                ports.append(self._port(name, self.network(self.external), groups=groups))
            internal_port = self._port(
                name,
                resource_key(NETWORK, p),
                subnet=ref(resource_key(SUBNET, p)),
                groups=groups,
                pairs=pairs,
            )
            ports.append(internal_port)
            internal = ref(internal_port.key, "ip")
        elif self.layout == "SimpleWithInternalNetwork":
            swin = self.c.simpleWithInternalNetwork
            assert swin is not None
            secured = swin.podNetworkMode == SECURED
            internal_port = self._port(
                name,
                self.internal_network,
                subnet=ref(resource_key(SUBNET, swin.internalSubnetName)),
                groups=extra_groups,
                pairs=[self.pod_cidr] if secured else None,
            )
            ports.append(internal_port)
            internal = ref(internal_port.key, "ip")
        else:
            assert self.external is not None
            networks = [ref(self.network(self.external))]
            security_groups = list(klass.additionalSecurityGroups)
        resources += ports
        server_props: dict[str, Any] = {
            "flavor_id": self.flavor(klass.flavorName),
            "flavor_name": klass.flavorName,
            "key_name": p,
            "availability_zone": zone,
            "config_drive": False if self.layout == "Standard" else not self.dhcp,
            "metadata": metadata,
        }
        if ports:
            server_props["ports"] = [ref(port.key) for port in ports]
        else:
            server_props["networks"] = networks
            if security_groups:
                server_props["security_groups"] = security_groups
        if klass.rootDiskSize:
            root = ResourceDef(
                kind=VOLUME,
                name=f"{p}-master-root-volume-{index}",
                properties={
                    "size": klass.rootDiskSize,
                    "image_id": self.image(klass.imageName),
                    "volume_type": volume_type,
                    "availability_zone": zone,
                    "metadata": metadata,
                },
            )
            resources.append(root)
            server_props["root_volume_id"] = ref(root.key)
        else:
            server_props["image_id"] = self.image(klass.imageName)
        if self.server_group is not None:
            server_props["server_group_id"] = self.server_group
        server = ResourceDef(
            kind=SERVER,
            name=name,
            properties=server_props,
            depends_on=[resource_key(KEYPAIR, p)],
            outputs=["id", "ip"],
        )
        resources.append(server)
        data = f"{p}-kubernetes-data-{index}"
        resources += [
            ResourceDef(
                kind=VOLUME,
                name=data,
                properties={
                    "size": klass.etcdDiskSizeGb,
                    "volume_type": volume_type,
                    "availability_zone": zone,
                    "metadata": dict(self.tags),
                    "description": DATA_DESCRIPTION,
                },
            ),
            ResourceDef(
                kind=ATTACHMENT,
                name=data,
                properties={
                    "volume_id": ref(resource_key(VOLUME, data)),
                    "server_id": ref(server.key),
                },
                outputs=["id", "device"],
            ),
        ]
        ssh: Any = ref(ports[0].key, "ip") if ports else ref(server.key, "ip")
        if internal is None:
            internal = ref(server.key, "ip")
        fip_pool = self._master_fip_pool()
        if fip_pool is not None:
            fip = self._floating_ip(name, fip_pool, ports[0].key)
            resources.append(fip)
            ssh = ref(fip.key, "address")
        return ModuleDef(
            id=f"master-{index}",
            module="master-node",
            node_name=name,
            group=MASTERS,
            machine=server.key,
            resources=resources,
            outputs={
                "master_ip_address_for_ssh": ssh,
                "node_internal_ip_address": internal,
                "kubernetes_data_device_path": ref(resource_key(ATTACHMENT, data), "device"),
            },
        )

    def _master_fip_pool(self) -> str | None:
        if self.layout == "Standard":
            return self.external if self.bastion is None else None
        swin = self.c.simpleWithInternalNetwork
        if self.layout == "SimpleWithInternalNetwork" and swin is not None:
            return self.external if swin.masterWithExternalFloatingIP and self.external else None
        return None

    # -- static-node -----------------------------------------------------------------------
    def static(self, group: OpenStackNodeGroup, index: int) -> ModuleDef:
        p, klass = self.p, group.instanceClass
        name = f"{p}-{group.name}-{index}"
        zones = sorted(set(self.zones) & set(group.zones)) if group.zones else self.zones
        if not zones:
            raise LayoutError(f"node group {group.name}: none of its zones is a cluster zone")
        zone = self._zone(index, group.volumeTypeMap, zones, f"nodeGroups {group.name}")
        names = [klass.mainNetwork]
        if self.layout == "StandardWithNoRouter":
            names.append(p)
        names += klass.additionalNetworks
        # upstream: the internal network's name (SimpleWithInternalNetwork: the network of
        # ``internalSubnetName``, known only after a lookup; its nodes' main network here)
        secured_network = {
            "SimpleWithInternalNetwork": klass.mainNetwork,
            "Simple": self.external,
        }.get(self.layout, p)
        mode = self._pod_network_mode()
        pairs_on = self.security or mode == SECURED
        groups = [*([ref(resource_key(SG, p))] if self.security else [])]
        groups += [self.group(g) for g in klass.additionalSecurityGroups]
        metadata = {**self.tags, **klass.additionalTags}
        ports = []
        for network_name in names:
            network = self.network(network_name)
            ports.append(
                self._port(
                    name,
                    network,
                    groups=[] if network_name in klass.networksWithSecurityDisabled else groups,
                    pairs=[self.pod_cidr] if pairs_on and network_name == secured_network else None,
                )
            )
        resources: list[ResourceDef] = list(ports)
        server_props: dict[str, Any] = {
            "flavor_id": self.flavor(klass.flavorName),
            "flavor_name": klass.flavorName,
            "key_name": p,
            "availability_zone": zone,
            "config_drive": klass.configDrive,
            "ports": [ref(port.key) for port in ports],
            "metadata": metadata,
        }
        if klass.rootDiskSize:
            root = ResourceDef(
                kind=VOLUME,
                name=name,
                properties={
                    "size": klass.rootDiskSize,
                    "image_id": self.image(klass.imageName),
                    "volume_type": group.volumeTypeMap.get(zone),
                    "availability_zone": zone,
                    "metadata": metadata,
                },
            )
            resources.append(root)
            server_props["root_volume_id"] = ref(root.key)
        else:
            server_props["image_id"] = self.image(klass.imageName)
        server = ResourceDef(
            kind=SERVER,
            name=name,
            properties=server_props,
            depends_on=[resource_key(KEYPAIR, p)],
            outputs=["id", "ip"],
        )
        resources.append(server)
        resources += [self._floating_ip(name, pool, ports[0].key) for pool in klass.floatingIPPools]
        return ModuleDef(
            id=f"static-{group.name}-{index}",
            module="static-node",
            node_name=name,
            group=group.name,
            machine=server.key,
            resources=resources,
            outputs={"node_internal_ip_address": ref(ports[0].key, "ip")},
        )

    # -- discovery -------------------------------------------------------------------------
    def _pod_network_mode(self) -> str:
        if self.layout in ("Standard", "StandardWithNoRouter"):
            return SECURED if self.security else "DirectRouting"
        if self.layout == "Simple":
            assert self.c.simple is not None
            return self.c.simple.podNetworkMode
        assert self.c.simpleWithInternalNetwork is not None
        return self.c.simpleWithInternalNetwork.podNetworkMode

    def discovery(self) -> dict[str, Any]:
        p = self.p
        data: dict[str, Any] = {
            "apiVersion": DISCOVERY_API_VERSION,
            "kind": DISCOVERY_KIND,
            "layout": self.layout,
            "podNetworkMode": self._pod_network_mode(),
            "zones": list(self.zones),
        }
        instances: dict[str, Any] = {
            "sshKeyPairName": p,
            "imageName": self.c.masterNodeGroup.instanceClass.imageName,
        }
        groups = [p] if self.security else []
        if self.layout == "Standard":
            assert self.external is not None
            data["internalNetworkNames"] = [ref(resource_key(NETWORK, p), "name")]
            data["externalNetworkNames"] = [ref(self.network(self.external), "name")]
            instances.update(
                mainNetwork=ref(resource_key(NETWORK, p), "name"), securityGroups=groups
            )
            data["loadBalancer"] = {
                "subnetID": ref(resource_key(SUBNET, p)),
                "floatingNetworkID": ref(self.network(self.external)),
            }
        elif self.layout == "StandardWithNoRouter":
            assert self.external is not None
            data["internalNetworkNames"] = [ref(resource_key(NETWORK, p), "name")]
            data["externalNetworkNames"] = [ref(self.network(self.external), "name")]
            instances.update(
                mainNetwork=ref(self.network(self.external), "name"),
                additionalNetworks=[ref(resource_key(NETWORK, p), "name")],
                securityGroups=groups,
            )
        elif self.layout == "Simple":
            assert self.external is not None
            data["internalNetworkNames"] = [ref(self.network(self.external), "name")]
            instances["mainNetwork"] = ref(self.network(self.external), "name")
        else:
            swin = self.c.simpleWithInternalNetwork
            assert swin is not None
            internal = ref(self.internal_network, "name")
            data["internalNetworkNames"] = [internal]
            instances["mainNetwork"] = internal
            if self.external:
                data["externalNetworkNames"] = [ref(self.network(self.external))]
                data["loadBalancer"] = {
                    "subnetID": ref(resource_key(SUBNET, swin.internalSubnetName)),
                    "floatingNetworkID": ref(self.network(self.external)),
                }
            else:
                data["externalNetworkNames"] = []
                data["loadBalancer"] = {}
        data["instances"] = instances
        return data


def define(
    config: OpenStackClusterConfiguration, cluster: ClusterIdentity, zones: list[str]
) -> LayoutDef:
    """The layout's definitions; :class:`LayoutError` for what it cannot build."""
    if config.layout not in LAYOUTS:
        raise LayoutError(f"layout {config.layout} is not supported (use one of {LAYOUTS})")
    build = _Builder(config, cluster, zones)
    base = build.base()
    nodes = [build.master(i) for i in range(config.masterNodeGroup.replicas)]
    for group in config.nodeGroups:
        nodes += [build.static(group, i) for i in range(group.replicas)]
    discovery = build.discovery()
    # the lookups every module needs come first in the base, alone in its first wave: a name
    # the cloud does not know stops the apply before anything is made
    lookups = [r.key for r in build.base_resources if not r.depends_on and not _refs(r)]
    for resource in base.resources:
        resource.depends_on = [*lookups, *resource.depends_on]
    base.resources = [*build.base_resources, *base.resources]
    return LayoutDef(
        provider="openstack",
        layout=config.layout,
        prefix=cluster.prefix,
        uuid=cluster.uuid,
        modules=[base, *nodes],
        discovery=discovery,
    )
