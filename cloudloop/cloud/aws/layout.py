"""AWS layouts ``WithoutNAT`` and ``WithNAT`` as definitions (Deckhouse ``candi/layouts``).

:func:`define` turns a validated ``AWSClusterConfiguration`` into the resources of
``base-infrastructure`` (VPC, subnets, gateways, route tables, security groups, IAM, key pair,
the WithNAT bastion), one ``master-node`` per replica and one ``static-node`` per node group
index, with the reference's names, tags and outputs, and the ``AWSCloudDiscoveryData``
template. :mod:`cloudloop.cloud.aws.layout_resources` acts on them.
What is made, and the departures from Terraform: docs/decisions/0051-aws-layouts.md.

Rules:
- Subnets only for the zones the cluster uses (``zones`` ∩ the region's, else all of them).
- Security group rules are one authoritative resource per group; rules from groups outside the
  layout (the CCM's) are left alone.
- An EIP's association is a property of the EIP (``instance_id``), not a resource.
- With ``existingVPCID`` and no ``nodeNetworkCIDR`` a subnet's ``cidr_block`` is a ``cidrsubnet``
  of the looked-up VPC's CIDR, computed when the step runs; VPC peering is refused.
"""

from __future__ import annotations

import ipaddress
import json
import math
from typing import Any

from cloudloop.layouts.bootstrap import MASTERS
from cloudloop.layouts.config import AWSClusterConfiguration, AwsInstanceClass, ClusterIdentity
from cloudloop.layouts.model import (
    LayoutDef,
    LayoutError,
    ModuleDef,
    ResourceDef,
    assemble,
    ref,
    resource_key,
)

LAYOUTS = ("WithoutNAT", "WithNAT")
DISCOVERY_API_VERSION = "deckhouse.io/v1"
DISCOVERY_KIND = "AWSCloudDiscoveryData"
DATA_DEVICE = "/dev/xvdf"
DEFAULT_ROOT_GB = 20
DEFAULT_ROOT_TYPE = "gp2"
ASSUME_EC2 = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}
NODE_ACTIONS = ("ec2:DescribeTags", "ec2:DescribeInstances")

VPC = "aws.vpc"
SUBNET = "aws.subnet"
IGW = "aws.internet_gateway"
EIP = "aws.eip"
NAT = "aws.nat_gateway"
ROUTE_TABLE = "aws.route_table"
ASSOCIATION = "aws.route_table_association"
SG = "aws.security_group"
SG_RULES = "aws.security_group_rules"
ROLE = "aws.iam_role"
ROLE_POLICY = "aws.iam_role_policy"
PROFILE = "aws.iam_instance_profile"
KEY_PAIR = "aws.key_pair"
VOLUME = "aws.ebs_volume"
ATTACHMENT = "aws.volume_attachment"
INSTANCE = "aws.instance"


def cidr_split(cidr: str, newbits: int, index: int) -> str:
    """Terraform's ``cidrsubnet(cidr, newbits, index)``."""
    network = ipaddress.ip_network(cidr, strict=False)
    size = 2 ** (network.max_prefixlen - network.prefixlen - newbits)
    base = int(network.network_address) + index * size
    return f"{ipaddress.ip_address(base)}/{network.prefixlen + newbits}"


def subnet_cidr(value: Any) -> str:
    """A subnet's ``cidr_block`` property as a CIDR (a ``{"network", "newbits", "netnum"}``
    split of the existing VPC's CIDR, resolved, is split here)."""
    if isinstance(value, dict):
        return cidr_split(str(value["network"]), int(value["newbits"]), int(value["netnum"]))
    return str(value)


def _rule(
    protocol: str, *, cidr: str = "", group: Any = None, port: int | None = None
) -> dict[str, Any]:
    rule: dict[str, Any] = {"protocol": protocol}
    if port is not None:
        rule["from_port"] = rule["to_port"] = port
    elif protocol == "icmp":
        rule["from_port"] = rule["to_port"] = -1
    if group is not None:
        rule["group"] = group
    else:
        rule["cidr"] = cidr
    return rule


class _Builder:
    def __init__(self, config: AWSClusterConfiguration, cluster: ClusterIdentity, zones: list[str]):
        self.c = config
        self.p = cluster.prefix
        self.uuid = cluster.uuid
        self.nat = config.layout == "WithNAT"
        available = sorted(set(zones))
        wanted = sorted(set(available) & set(config.zones)) if config.zones else available
        if not wanted:
            raise LayoutError(f"none of zones {config.zones} is in the region ({available})")
        self.zones = wanted
        self.cluster_tags = {
            f"kubernetes.io/cluster/{cluster.uuid}": "shared",
            f"kubernetes.io/cluster/{cluster.prefix}": "shared",
        }
        self.bastion = config.withNAT.bastionInstance if self.nat and config.withNAT else None

    def tags(self, name: str, *extra: dict[str, str]) -> dict[str, str]:
        tags = dict(self.c.tags)
        for more in extra:
            tags.update(more)
        tags["Name"] = name
        return tags

    # -- base-infrastructure ---------------------------------------------------------------
    def base(self) -> ModuleDef:
        c, p = self.c, self.p
        if c.peeredVPCs:
            raise LayoutError("peeredVPCs: VPC peering is not supported by this engine yet")
        resources: list[ResourceDef] = []
        vpc_key = resource_key(VPC, p)
        if c.existingVPCID:
            resources.append(
                ResourceDef(
                    kind=VPC,
                    name=p,
                    properties={"vpc_id": c.existingVPCID},
                    outputs=["id", "cidr_block"],
                    read_only=True,
                )
            )
        else:
            resources.append(
                ResourceDef(
                    kind=VPC,
                    name=p,
                    tags=self.tags(p),
                    properties={"cidr_block": c.vpcNetworkCIDR, "enable_dns_hostnames": True},
                    outputs=["id", "cidr_block"],
                )
            )
        # the existing VPC's CIDR when neither is given (split when the subnet's step runs)
        node_cidr: Any = c.nodeNetworkCIDR or c.vpcNetworkCIDR or ref(vpc_key, "cidr_block")
        n = len(self.zones)
        newbits = math.ceil(math.log2(2 * n if self.nat else n)) if n > 1 or self.nat else 0
        for i, zone in enumerate(self.zones):
            role = {"kubernetes.io/role/elb": "1"} if self.nat else {}
            resources.append(self._subnet(f"{p}-public-{i}", node_cidr, newbits, i, zone, role))
        if self.nat:
            for i, zone in enumerate(self.zones):
                resources.append(
                    self._subnet(
                        f"{p}-internal-{i}",
                        node_cidr,
                        newbits,
                        i + n,
                        zone,
                        {"kubernetes.io/role/internal-elb": "1"},
                        public=False,
                    )
                )
        igw = resource_key(IGW, p)
        resources.append(
            ResourceDef(kind=IGW, name=p, tags=self.tags(p), properties={"vpc_id": ref(vpc_key)})
        )
        resources.append(self._route_table(f"{p}-public", {"gateway_id": ref(igw)}))
        resources += self._associations("public", f"{p}-public")
        if self.nat:
            eip_key = resource_key(EIP, f"{p}-natgw")
            resources.append(
                ResourceDef(
                    kind=EIP,
                    name=f"{p}-natgw",
                    tags=self.tags(f"{p}-natgw"),
                    outputs=["id", "public_ip"],
                )
            )
            resources.append(
                ResourceDef(
                    kind=NAT,
                    name=p,
                    tags=self.tags(p),
                    properties={
                        "subnet_id": ref(resource_key(SUBNET, f"{p}-public-0")),
                        "allocation_id": ref(eip_key),
                    },
                    depends_on=[igw],
                )
            )
            resources.append(
                self._route_table(f"{p}-internal", {"nat_gateway_id": ref(resource_key(NAT, p))})
            )
            resources += self._associations("internal", f"{p}-internal")
        resources += self._security_groups()
        resources += self._iam()
        resources.append(
            ResourceDef(
                kind=KEY_PAIR,
                name=p,
                tags={**c.tags, "Cluster": p},
                properties={"public_key": c.sshPublicKey.strip()},
                outputs=["id", "name"],
            )
        )
        outputs: dict[str, Any] = {}
        if self.bastion is not None:
            resources += self._bastion()
            outputs["bastion_ip_address_for_ssh"] = ref(
                resource_key(EIP, f"{p}-bastion"), "public_ip"
            )
        return ModuleDef(
            id="base", module="base-infrastructure", resources=resources, outputs=outputs
        )

    def _subnet(
        self,
        name: str,
        cidr: Any,
        newbits: int,
        index: int,
        zone: str,
        role: dict[str, str],
        *,
        public: bool = True,
    ) -> ResourceDef:
        return ResourceDef(
            kind=SUBNET,
            name=name,
            tags=self.tags(name, self.cluster_tags, role),
            properties={
                "vpc_id": ref(resource_key(VPC, self.p)),
                "cidr_block": cidr_split(cidr, newbits, index)
                if isinstance(cidr, str)
                else {"network": cidr, "newbits": newbits, "netnum": index},
                "availability_zone": zone,
                "map_public_ip_on_launch": public,
            },
            outputs=["id", "availability_zone"],
        )

    def _route_table(self, name: str, target: dict[str, Any]) -> ResourceDef:
        return ResourceDef(
            kind=ROUTE_TABLE,
            name=name,
            tags=self.tags(name, self.cluster_tags),
            properties={
                "vpc_id": ref(resource_key(VPC, self.p)),
                "routes": [{"destination": "0.0.0.0/0", **target}],
            },
        )

    def _associations(self, side: str, table: str) -> list[ResourceDef]:
        return [
            ResourceDef(
                kind=ASSOCIATION,
                name=f"{self.p}-{side}-{i}",
                properties={
                    "route_table_id": ref(resource_key(ROUTE_TABLE, table)),
                    "subnet_id": ref(resource_key(SUBNET, f"{self.p}-{side}-{i}")),
                },
            )
            for i in range(len(self.zones))
        ]

    @property
    def node_sg(self) -> str | None:
        return None if self.c.disableDefaultSecurityGroup else resource_key(SG, f"{self.p}-node")

    def _security_groups(self) -> list[ResourceDef]:
        p, vpc = self.p, ref(resource_key(VPC, self.p))
        lb_key, ssh_key = (
            resource_key(SG, f"{p}-loadbalancer"),
            resource_key(SG, f"{p}-ssh-accessible"),
        )
        groups: list[ResourceDef] = []
        if self.node_sg is not None:
            groups.append(
                ResourceDef(
                    kind=SG,
                    name=f"{p}-node",
                    tags=self.tags(f"{p}-node", self.cluster_tags),
                    properties={"vpc_id": vpc, "description": f"{p} nodes"},
                )
            )
        groups.append(
            ResourceDef(
                kind=SG,
                name=f"{p}-loadbalancer",
                tags=self.tags(f"{p}-loadbalancer"),
                properties={"vpc_id": vpc, "description": f"{p} load balancers"},
            )
        )
        groups.append(
            ResourceDef(
                kind=SG,
                name=f"{p}-ssh-accessible",
                tags=self.tags(f"{p}-ssh-accessible"),
                properties={"vpc_id": vpc, "description": f"{p} SSH access"},
            )
        )
        own = [ref(g.key) for g in groups]
        rules: list[ResourceDef] = []
        if self.node_sg is not None:
            node = ref(self.node_sg)
            rules.append(
                ResourceDef(
                    kind=SG_RULES,
                    name=f"{p}-node",
                    properties={
                        "group_id": node,
                        "own_groups": own,
                        "ingress": [
                            _rule("-1", group=node),
                            _rule("-1", group=ref(lb_key)),
                            _rule("icmp", cidr="0.0.0.0/0"),
                        ],
                        "egress": [_rule("-1", cidr="0.0.0.0/0")],
                    },
                )
            )
        rules.append(
            ResourceDef(
                kind=SG_RULES,
                name=f"{p}-loadbalancer",
                properties={
                    "group_id": ref(lb_key),
                    "own_groups": own,
                    "ingress": [_rule("-1", cidr=c) for c in self.c.publicNetworkAllowList],
                    "egress": [
                        _rule("-1", group=ref(self.node_sg))
                        if self.node_sg
                        else _rule("-1", cidr="0.0.0.0/0")
                    ],
                },
            )
        )
        rules.append(
            ResourceDef(
                kind=SG_RULES,
                name=f"{p}-ssh-accessible",
                properties={
                    "group_id": ref(ssh_key),
                    "own_groups": own,
                    "ingress": [_rule("tcp", cidr=c, port=22) for c in self.c.sshAllowList],
                    "egress": [],
                },
            )
        )
        return groups + rules

    def _iam(self) -> list[ResourceDef]:
        name = f"{self.p}-node"
        role_key = resource_key(ROLE, name)
        actions = [*NODE_ACTIONS, *(self.c.additionalRolePolicies or [])]
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
        }
        return [
            ResourceDef(
                kind=ROLE,
                name=name,
                properties={"assume_role_policy": json.dumps(ASSUME_EC2, sort_keys=True)},
                outputs=["id", "name"],
            ),
            ResourceDef(
                kind=ROLE_POLICY,
                name=name,
                properties={
                    "role_name": ref(role_key, "name"),
                    "policy": json.dumps(policy, sort_keys=True),
                },
            ),
            ResourceDef(
                kind=PROFILE,
                name=name,
                properties={"role_name": self.c.iamNodeRole or ref(role_key, "name")},
                depends_on=[role_key],
                outputs=["id", "name"],
            ),
        ]

    def _subnet_for(self, zone: str, *, public: bool) -> Any:
        if zone not in self.zones:
            raise LayoutError(f"zone {zone!r} is not one of the cluster's zones {self.zones}")
        side = "public" if public else "internal"
        return ref(resource_key(SUBNET, f"{self.p}-{side}-{self.zones.index(zone)}"))

    def _instance(
        self,
        name: str,
        instance_class: AwsInstanceClass,
        zone: str,
        groups: list[Any],
        *,
        public_subnet: bool,
        extra_tags: dict[str, str],
        associate_public_ip: bool | None = None,
        node_tags: bool = True,
    ) -> ResourceDef:
        properties: dict[str, Any] = {
            "ami": instance_class.ami,
            "instance_type": instance_class.instanceType,
            "subnet_id": self._subnet_for(zone, public=public_subnet),
            "security_group_ids": [*groups, *instance_class.additionalSecurityGroups],
            "key_name": ref(resource_key(KEY_PAIR, self.p), "name"),
            "iam_profile": ref(resource_key(PROFILE, f"{self.p}-node"), "name"),
            "source_dest_check": False,
            "root_size_gb": instance_class.diskSizeGb or DEFAULT_ROOT_GB,
            "root_type": instance_class.diskType or DEFAULT_ROOT_TYPE,
        }
        if associate_public_ip is not None:
            properties["associate_public_ip"] = associate_public_ip
        tags = self.tags(name, extra_tags, self.cluster_tags if node_tags else {})
        return ResourceDef(
            kind=INSTANCE,
            name=name,
            tags=tags,
            properties=properties,
            outputs=["id", "private_ip", "public_ip", "availability_zone"],
        )

    def _bastion(self) -> list[ResourceDef]:
        assert self.bastion is not None
        zone = self.bastion.zone or self.zones[0]
        name = f"{self.p}-bastion"
        groups = [ref(g) for g in (self.node_sg, resource_key(SG, f"{self.p}-ssh-accessible")) if g]
        instance = self._instance(
            name,
            self.bastion.instanceClass,
            zone,
            groups,
            public_subnet=True,
            extra_tags={},
            node_tags=False,
        )
        instance.properties.pop("source_dest_check")
        return [
            instance,
            ResourceDef(
                kind=EIP,
                name=name,
                tags=self.tags(name),
                properties={"instance_id": ref(instance.key)},
                outputs=["id", "public_ip"],
            ),
        ]

    # -- nodes -----------------------------------------------------------------------------
    def master(self, index: int) -> ModuleDef:
        p, group = self.p, self.c.masterNodeGroup
        zones = sorted(set(group.zones or self.zones))
        zone = zones[index % len(zones)]
        name = f"{p}-master-{index}"
        data = f"{p}-kubernetes-data-{index}"
        groups = [ref(self.node_sg)] if self.node_sg else []
        if self.bastion is None:
            groups.append(ref(resource_key(SG, f"{p}-ssh-accessible")))
        instance = self._instance(
            name,
            group.instanceClass,
            zone,
            groups,
            public_subnet=not self.nat,
            extra_tags=group.additionalTags,
        )
        etcd = group.instanceClass.etcdDisk
        resources = [
            ResourceDef(
                kind=VOLUME,
                name=data,
                tags=self.tags(data),
                properties={"availability_zone": zone, "size_gb": etcd.sizeGb, "type": etcd.type},
            ),
            instance,
            ResourceDef(
                kind=ATTACHMENT,
                name=data,
                properties={
                    "volume_id": ref(resource_key(VOLUME, data)),
                    "instance_id": ref(instance.key),
                    "device": DATA_DEVICE,
                },
            ),
        ]
        ssh: Any = ref(instance.key, "private_ip")
        if not self.nat:
            resources.append(
                ResourceDef(
                    kind=EIP,
                    name=name,
                    tags=self.tags(name),
                    properties={"instance_id": ref(instance.key)},
                    outputs=["id", "public_ip"],
                )
            )
            ssh = ref(resource_key(EIP, name), "public_ip")
        return ModuleDef(
            id=f"master-{index}",
            module="master-node",
            node_name=name,
            group=MASTERS,
            machine=instance.key,
            resources=resources,
            outputs={
                "master_ip_address_for_ssh": ssh,
                "node_internal_ip_address": ref(instance.key, "private_ip"),
                "kubernetes_data_device_path": DATA_DEVICE,
            },
        )

    def static(self, group_index: int, index: int) -> ModuleDef:
        group = self.c.nodeGroups[group_index]
        zones = sorted(set(self.zones) & set(group.zones)) if group.zones else self.zones
        if not zones:
            raise LayoutError(f"node group {group.name}: none of its zones is a cluster zone")
        zone = zones[index % len(zones)]
        name = f"{self.p}-{group.name}-{index}"
        instance = self._instance(
            name,
            group.instanceClass,
            zone,
            [ref(self.node_sg)] if self.node_sg else [],
            public_subnet=not self.nat,
            extra_tags=group.additionalTags,
            associate_public_ip=True if not self.nat else None,
        )
        resources = [instance]
        outputs: dict[str, Any] = {"node_internal_ip_address": ref(instance.key, "private_ip")}
        if not self.nat:
            resources.append(
                ResourceDef(
                    kind=EIP,
                    name=name,
                    tags=self.tags(name),
                    properties={"instance_id": ref(instance.key)},
                    outputs=["id", "public_ip"],
                )
            )
        return ModuleDef(
            id=f"static-{group.name}-{index}",
            module="static-node",
            node_name=name,
            group=group.name,
            machine=instance.key,
            resources=resources,
            outputs=outputs,
        )

    def discovery(self) -> dict[str, Any]:
        side = "internal" if self.nat else "public"
        return {
            "apiVersion": DISCOVERY_API_VERSION,
            "kind": DISCOVERY_KIND,
            "keyName": self.p,
            "instances": {
                "ami": self.c.masterNodeGroup.instanceClass.ami,
                "additionalSecurityGroups": [ref(self.node_sg)] if self.node_sg else [],
                "associatePublicIPAddress": not self.nat,
                "iamProfileName": f"{self.p}-node",
            },
            "loadBalancerSecurityGroup": ref(resource_key(SG, f"{self.p}-loadbalancer")),
            "zones": list(self.zones),
            "zoneToSubnetIdMap": {
                zone: ref(resource_key(SUBNET, f"{self.p}-{side}-{i}"))
                for i, zone in enumerate(self.zones)
            },
        }


def define(
    config: AWSClusterConfiguration, cluster: ClusterIdentity, zones: list[str]
) -> LayoutDef:
    """The layout's definitions; :class:`LayoutError` for what it cannot build."""
    return assemble(
        "aws",
        config,
        cluster.prefix,
        cluster.uuid,
        lambda: _Builder(config, cluster, zones),
        layouts=LAYOUTS,
    )
