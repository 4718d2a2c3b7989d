"""AWS layout resources through boto3: find by name/tags, create, repair drift, delete.

One handler per kind of :mod:`cloudloop.cloud.aws.layout` (``aws.vpc``, ``aws.subnet``...), all
on the driver's session (:class:`~cloudloop.cloud.aws.base.AwsBase`), signed with the
``AWSClusterConfiguration``'s credentials and region; the worker's AWS settings give the endpoint
and timeouts. Why: docs/decisions/0051-aws-layouts.md.

Rules:
- EC2 resources are found by their ``Name`` tag and created with their tags in the create call;
  IAM objects and key pairs by name; associations and attachments by what they join. Two of one
  name is ``AlreadyExists``, never a guess.
- Drift repaired in place, leaving keys, routes and rules that are not the layout's; immutable
  fields (CIDRs, zones, instance type, AMI) are reported, never repaired.
- Bootstrap data goes in ``UserData`` with its digest in the tag ``cloudloop.io/user-data-sha256``;
  other data later is an immutable change. Over EC2's 16 KiB it is refused before any create.
- A second ensure of an unchanged resource makes only Describe/Get calls.
- A refusal that passes once something settles repeats the whole step (find first) for up to
  ``wait_s``. ``delete`` is idempotent and waits for what must be gone before the next step.
- ``adopt`` tags what a Terraform state names by ID with the layout's ``Name`` (refused when
  another holds it, or where the name is the identity); drift is shown, not repaired.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from cloudloop.cloud import errors
from cloudloop.cloud.aws import layout as defs
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.layout_state import STATE_TYPES
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.aws.tags import tag_dict
from cloudloop.cloud.layouts import Drift, Ensured, Found, user_data_drift
from cloudloop.layouts import bootstrap
from cloudloop.layouts.config import AWSClusterConfiguration
from cloudloop.layouts.model import LayoutDef, ResourceDef
from cloudloop.layouts.tfstate import StateMapping

_LIVE_INSTANCE = ["pending", "running", "stopping", "stopped"]
#: What an instance booted with (its user data's SHA-256), for plan to compare.
USER_DATA_TAG = bootstrap.DIGEST_KEY
#: EC2's limit on user data, before base64.
MAX_USER_DATA = 16 * 1024
_LIVE_NAT = ["pending", "available"]
Props = dict[str, Any]
#: Kind → the suffix of its handler methods (``_find_<s>``, ``_create_<s>``, ``_drift_<s>``,
#: ``_fix_<s>``, ``_delete_<s>``).
_HANDLERS = {
    defs.VPC: "vpc",
    defs.SUBNET: "subnet",
    defs.IGW: "igw",
    defs.EIP: "eip",
    defs.NAT: "nat",
    defs.ROUTE_TABLE: "rt",
    defs.ASSOCIATION: "assoc",
    defs.SG: "sg",
    defs.SG_RULES: "rules",
    defs.ROLE: "role",
    defs.ROLE_POLICY: "policy",
    defs.PROFILE: "profile",
    defs.KEY_PAIR: "key",
    defs.VOLUME: "volume",
    defs.ATTACHMENT: "attachment",
    defs.INSTANCE: "instance",
}
#: Kinds whose drift check or repair is a shared one: (drift, fix) method names.
_REPAIRS = {
    defs.NAT: ("drift_nat", "fix_tags"),
    defs.ASSOCIATION: ("no_drift", "no_fix"),
    defs.SG: ("drift_tags", "fix_tags"),
    defs.ROLE_POLICY: ("drift_policy", "create_policy"),
    defs.KEY_PAIR: ("drift_tags", "fix_tags"),
    defs.VOLUME: ("drift_volume", "fix_tags"),
    defs.ATTACHMENT: ("no_drift", "no_fix"),
}


#: Kinds adopted by ID: (operation, method, answer key, ID parameter, live states or ()).
_BY_ID: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    defs.VPC: ("DescribeVpcs", "describe_vpcs", "Vpcs", "VpcIds", ()),
    defs.SUBNET: ("DescribeSubnets", "describe_subnets", "Subnets", "SubnetIds", ()),
    defs.IGW: (
        "DescribeInternetGateways",
        "describe_internet_gateways",
        "InternetGateways",
        "InternetGatewayIds",
        (),
    ),
    defs.EIP: ("DescribeAddresses", "describe_addresses", "Addresses", "AllocationIds", ()),
    defs.NAT: (
        "DescribeNatGateways",
        "describe_nat_gateways",
        "NatGateways",
        "NatGatewayIds",
        tuple(_LIVE_NAT),
    ),
    defs.ROUTE_TABLE: (
        "DescribeRouteTables",
        "describe_route_tables",
        "RouteTables",
        "RouteTableIds",
        (),
    ),
    defs.SG: (
        "DescribeSecurityGroups",
        "describe_security_groups",
        "SecurityGroups",
        "GroupIds",
        (),
    ),
    defs.VOLUME: (
        "DescribeVolumes",
        "describe_volumes",
        "Volumes",
        "VolumeIds",
        ("creating", "available", "in-use"),
    ),
    defs.INSTANCE: (
        "DescribeInstances",
        "describe_instances",
        "Reservations",
        "InstanceIds",
        tuple(_LIVE_INSTANCE),
    ),
}
#: Kinds whose name is their identity (adopted when the state's name is the layout's).
_NAMED = (defs.ROLE, defs.ROLE_POLICY, defs.PROFILE, defs.KEY_PAIR)


def _state_of(raw: dict[str, Any]) -> Any:
    """An instance's state name, a NAT gateway's or a volume's state."""
    state = raw.get("State")
    return state.get("Name") if isinstance(state, dict) else state


def _name_filter(name: str) -> dict[str, Any]:
    return {"Name": "tag:Name", "Values": [name]}


def _one(found: list[dict[str, Any]], what: str, name: str) -> dict[str, Any] | None:
    if len(found) > 1:
        raise errors.AlreadyExists(NAME, what, f"{len(found)} resources named {name!r}")
    return found[0] if found else None


def _tag_spec(kind: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def _tag_drift(raw: dict[str, Any], want: dict[str, str]) -> list[Drift]:
    have = tag_dict(raw.get("Tags"))
    return [Drift(f"tags.{k}", have.get(k), v) for k, v in want.items() if have.get(k) != v]


def _rule_set(permissions: list[dict[str, Any]]) -> set[tuple[str, int, int, str, str]]:
    """EC2 ``IpPermissions`` as (protocol, from, to, "cidr"|"group", source) tuples."""
    rules: set[tuple[str, int, int, str, str]] = set()
    for perm in permissions:
        proto = str(perm.get("IpProtocol", "-1"))
        low = int(perm.get("FromPort", -1)) if proto != "-1" else -1
        high = int(perm.get("ToPort", -1)) if proto != "-1" else -1
        for r in perm.get("IpRanges", []):
            rules.add((proto, low, high, "cidr", str(r["CidrIp"])))
        for g in perm.get("UserIdGroupPairs", []):
            rules.add((proto, low, high, "group", str(g["GroupId"])))
    return rules


def _desired_rules(rules: list[dict[str, Any]]) -> set[tuple[str, int, int, str, str]]:
    out: set[tuple[str, int, int, str, str]] = set()
    for rule in rules:
        proto = str(rule["protocol"])
        low = int(rule.get("from_port", -1)) if proto != "-1" else -1
        high = int(rule.get("to_port", -1)) if proto != "-1" else -1
        if rule.get("group"):
            out.add((proto, low, high, "group", str(rule["group"])))
        else:
            out.add((proto, low, high, "cidr", str(rule["cidr"])))
    return out


#: Refusals that pass once something else settles: a terminated instance's interface still
#: in the subnet or group, a role still in a profile, a new instance profile not yet visible
#: to EC2 (IAM is eventually consistent).
_SETTLING = (
    "DependencyViolation",
    "DeleteConflict",
    "Invalid IAM Instance Profile",
)
#: NotFound codes of the IDs the layout's own steps return (eventual consistency).
_UNSEEN = (
    "InvalidInstanceID.NotFound",
    "InvalidAllocationID.NotFound",
    "InvalidSubnetID.NotFound",
    "InvalidVpcID.NotFound",
    "InvalidRouteTableID.NotFound",
    "InvalidInternetGatewayID.NotFound",
    "InvalidNatGatewayID.NotFound",
    "InvalidVolume.NotFound",
)
_UNSEEN_S = 60.0
#: A new group's rules: none in, everything out.
_DEFAULT_RULES: dict[str, set[tuple[str, int, int, str, str]]] = {
    "ingress": set(),
    "egress": {("-1", -1, -1, "cidr", "0.0.0.0/0")},
}


def _permission(rule: tuple[str, int, int, str, str]) -> dict[str, Any]:
    proto, low, high, source, value = rule
    perm: dict[str, Any] = {"IpProtocol": proto}
    if proto != "-1":
        perm["FromPort"], perm["ToPort"] = low, high
    if source == "cidr":
        perm["IpRanges"] = [{"CidrIp": value}]
    else:
        perm["UserIdGroupPairs"] = [{"GroupId": value}]
    return perm


def _policy(document: Any) -> Any:
    """An IAM policy document as data (IAM answers URL-encoded JSON text, or parsed JSON)."""
    if isinstance(document, str):
        return json.loads(unquote(document))
    return document


def _as_set(value: Any) -> Any:
    """A string or a list of strings as a sorted list (IAM reads ``"*"`` as ``["*"]``)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sorted(set(value))
    return value


def _statement(statement: Any) -> Any:
    if not isinstance(statement, dict):
        return statement
    out: dict[str, Any] = {}
    for key, value in statement.items():
        if key in ("Action", "NotAction", "Resource", "NotResource"):
            out[key] = _as_set(value)
        elif key in ("Principal", "NotPrincipal") and isinstance(value, dict):
            out[key] = {k: _as_set(v) for k, v in value.items()}
        elif key == "Condition" and isinstance(value, dict):
            out[key] = {
                op: {k: _as_set(v) for k, v in tests.items()} if isinstance(tests, dict) else tests
                for op, tests in value.items()
            }
        else:
            out[key] = value
    return out


def equivalent_policy(document: Any) -> Any:
    """An IAM policy in the form IAM compares (Terraform's ``awspolicyequivalence``): a lone
    statement or value is a one-element list, actions, resources, principals and condition
    values are sets, statements are unordered."""
    if not isinstance(document, dict):
        return document
    statements = document.get("Statement")
    if statements is None:
        return document
    listed = statements if isinstance(statements, list) else [statements]
    canonical = [_statement(s) for s in listed]
    return {
        **document,
        "Statement": sorted(canonical, key=lambda s: json.dumps(s, sort_keys=True)),
    }


class AwsLayoutResources(AwsBase):
    """The AWS :class:`~cloudloop.cloud.layouts.LayoutResources`."""

    def __init__(self, settings: AwsSettings, *, poll_s: float = 1.0, wait_s: float = 600.0):
        super().__init__(settings)
        self.poll_s = poll_s
        self.wait_s = wait_s

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

    @property
    def iam(self) -> Any:
        return self.client("iam")

    # -- the contract ----------------------------------------------------------------------
    def layout_zones(self) -> list[str]:
        with calling("DescribeAvailabilityZones"):
            answer = self.ec2.describe_availability_zones(
                Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
            )
        return sorted(str(z["ZoneName"]) for z in answer.get("AvailabilityZones", []))

    def _handler(self, resource: ResourceDef) -> tuple[Callable[..., Any], ...]:
        """(find, create, drift, fix, delete) of the resource's kind."""
        suffix = _HANDLERS.get(resource.kind)
        if suffix is None:
            raise errors.NotSupported(NAME, f"layout resource {resource.kind}")
        drift, fix = _REPAIRS.get(resource.kind, (f"drift_{suffix}", f"fix_{suffix}"))
        return tuple(
            getattr(self, f"_{verb}")
            for verb in (f"find_{suffix}", f"create_{suffix}", drift, fix, f"delete_{suffix}")
        )

    def inspect(self, resource: ResourceDef, properties: Props) -> Found | None:
        find, _, drift, _, _ = self._handler(resource)
        raw = find(resource, properties)
        if raw is None:
            return None
        return Found(outputs=self._outputs(resource, raw), drift=drift(resource, properties, raw))

    def _patiently(self, call: Callable[[], Any]) -> Any:
        """``call`` again (it finds before it acts) while AWS answers that something it
        depends on is still settling: up to ``wait_s`` for a dependency, up to
        :data:`_UNSEEN_S` for an ID another step just returned that EC2 does not show yet."""
        started = time.monotonic()
        while True:
            try:
                return call()
            except (errors.InvalidRequest, errors.NotFound) as exc:
                unseen = isinstance(exc, errors.NotFound) and exc.message.startswith(_UNSEEN)
                settling = unseen or (
                    isinstance(exc, errors.InvalidRequest)
                    and any(code in exc.message for code in _SETTLING)
                )
                limit = _UNSEEN_S if unseen else self.wait_s
                if not settling:
                    raise
                if time.monotonic() - started > limit:
                    raise errors.CloudError(NAME, exc.operation, exc.message) from exc
            time.sleep(self.poll_s)

    def ensure(self, resource: ResourceDef, properties: Props) -> Ensured:
        result: Ensured = self._patiently(lambda: self._ensure(resource, properties))
        return result

    def _ensure(self, resource: ResourceDef, properties: Props) -> Ensured:
        find, create, drift, fix, _ = self._handler(resource)
        raw = find(resource, properties)
        if raw is None:
            raw = create(resource, properties)
            return Ensured("created", self._outputs(resource, raw))
        changed = drift(resource, properties, raw)
        repairable = [d for d in changed if not d.immutable]
        if not repairable:
            return Ensured("unchanged", self._outputs(resource, raw), changed)
        fix(resource, properties, raw, repairable)
        raw = find(resource, properties) or raw
        return Ensured("updated", self._outputs(resource, raw), changed)

    def delete(self, resource: ResourceDef, properties: Props) -> bool:
        deleted: bool = self._patiently(lambda: self._delete(resource, properties))
        return deleted

    def _delete(self, resource: ResourceDef, properties: Props) -> bool:
        find, _, _, _, delete = self._handler(resource)
        raw = find(resource, properties)
        if raw is None:
            return False
        delete(resource, properties, raw)
        return True

    def refusals(self, resource: ResourceDef, properties: Props) -> list[str]:
        """An instance's AMI that EC2 does not have (the looked-up VPC is the engine's)."""
        if resource.kind != defs.INSTANCE or not properties.get("ami"):
            return []
        size = bootstrap.size_of(properties.get("user_data"))
        too_big = (
            [f"{resource.key}: user data of {size} bytes is over EC2's {MAX_USER_DATA} bytes"]
            if size > MAX_USER_DATA
            else []
        )
        ami = str(properties["ami"])
        try:
            with calling("DescribeImages"):
                images = self.ec2.describe_images(ImageIds=[ami]).get("Images", [])
        except errors.NotFound:
            images = []
        return too_big + ([] if images else [f"{resource.key}: image {ami} not found"])

    # -- adoption --------------------------------------------------------------------------
    def adopt(self, resource: ResourceDef, properties: Props, cloud_id: str) -> Found | None:
        found: Found | None = self._patiently(lambda: self._adopt(resource, properties, cloud_id))
        return found

    def _by_id(self, kind: str, cloud_id: str) -> dict[str, Any] | None:
        operation, method, key, parameter, live = _BY_ID[kind]
        try:
            found = self._describe(
                operation, getattr(self.ec2, method), key, **{parameter: [cloud_id]}
            )
        except errors.NotFound:
            return None
        if kind == defs.INSTANCE:
            found = [i for r in found for i in r.get("Instances", [])]
        if live:
            found = [raw for raw in found if _state_of(raw) in live]
        if not found:
            return None
        found[0]["_id"] = cloud_id
        return found[0]

    def _adopt(self, resource: ResourceDef, props: Props, cloud_id: str) -> Found | None:
        if resource.kind in _BY_ID:
            raw = self._by_id(resource.kind, cloud_id)
            if raw is None:
                return None
            if resource.kind == defs.SG and raw.get("GroupName") != resource.name:
                raise errors.InvalidRequest(
                    NAME,
                    "adopt",
                    f"{resource.key}: {cloud_id} is named {raw.get('GroupName')!r} (a security "
                    "group's name is its identity and cannot change)",
                )
            if tag_dict(raw.get("Tags")).get("Name") != resource.name:
                find = self._handler(resource)[0]
                other = find(resource, props)
                if other is not None and other["_id"] != cloud_id:
                    raise errors.AlreadyExists(
                        NAME,
                        "adopt",
                        f"{resource.key} is {other['_id']} already; the state names {cloud_id}",
                    )
                with calling("CreateTags"):
                    self.ec2.create_tags(
                        Resources=[cloud_id], Tags=[{"Key": "Name", "Value": resource.name}]
                    )
        elif resource.kind in _NAMED and cloud_id.rsplit(":", 1)[-1] != resource.name:
            raise errors.InvalidRequest(
                NAME,
                "adopt",
                f"{resource.key}: the state's is named {cloud_id!r} (the name is its identity)",
            )
        found = self.inspect(resource, props)
        if found is not None and resource.kind in _BY_ID and found.outputs.get("id") != cloud_id:
            raise errors.AlreadyExists(
                NAME, "adopt", f"{resource.key} is {found.outputs.get('id')}, not {cloud_id}"
            )
        return found

    def blockers(self, layout: LayoutDef, found: dict[str, dict[str, Any]]) -> list[str]:
        vpc_id = (found.get(f"{defs.VPC}/{layout.prefix}") or {}).get("id")
        if not vpc_id:
            return []
        blockers: list[str] = []
        with calling("DescribeLoadBalancers"):
            classic = (
                self.client("elb").describe_load_balancers().get("LoadBalancerDescriptions", [])
            )
        blockers += [f"ELB {lb['LoadBalancerName']}" for lb in classic if lb.get("VPCId") == vpc_id]
        with calling("DescribeLoadBalancers"):
            v2 = self.client("elbv2").describe_load_balancers().get("LoadBalancers", [])
        blockers += [
            f"{lb.get('Type', 'elbv2')} {lb['LoadBalancerName']}"
            for lb in v2
            if lb.get("VpcId") == vpc_id
        ]
        ours = {r.name for m in layout.modules for r in m.resources}
        for tag in (
            f"kubernetes.io/cluster/{layout.uuid}",
            f"kubernetes.io/cluster/{layout.prefix}",
        ):
            with calling("DescribeVolumes"):
                volumes = self.ec2.describe_volumes(
                    Filters=[{"Name": "tag-key", "Values": [tag]}]
                ).get("Volumes", [])
            for volume in volumes:
                if tag_dict(volume.get("Tags")).get("Name") not in ours:
                    blockers.append(f"volume {volume['VolumeId']}")
        with calling("DescribeInstances"):
            pages = self.ec2.describe_instances(
                Filters=[
                    {"Name": "vpc-id", "Values": [vpc_id]},
                    {"Name": "instance-state-name", "Values": _LIVE_INSTANCE},
                ]
            )
        for reservation in pages.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                if tag_dict(instance.get("Tags")).get("Name") not in ours:
                    blockers.append(f"instance {instance['InstanceId']}")
        return sorted(set(blockers))

    # -- outputs ---------------------------------------------------------------------------
    def _outputs(self, resource: ResourceDef, raw: dict[str, Any]) -> dict[str, Any]:
        values = {
            "id": raw.get("_id"),
            "name": resource.name,
            "cidr_block": raw.get("CidrBlock"),
            "availability_zone": raw.get("AvailabilityZone")
            or (raw.get("Placement") or {}).get("AvailabilityZone"),
            "private_ip": raw.get("PrivateIpAddress"),
            "public_ip": raw.get("PublicIp") or raw.get("PublicIpAddress"),
        }
        return {k: values.get(k) for k in resource.outputs}

    # -- shared ----------------------------------------------------------------------------
    def _no_drift(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        return []

    def _no_fix(self, *_: Any) -> None:
        return None

    def _drift_tags(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        return _tag_drift(raw, resource.tags)

    def _fix_tags(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        tags = [
            {"Key": d.field.removeprefix("tags."), "Value": d.want}
            for d in drift
            if d.field.startswith("tags.")
        ]
        if tags:
            with calling("CreateTags"):
                self.ec2.create_tags(Resources=[raw["_id"]], Tags=tags)

    def _wait(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.wait_s
        while not done():
            if time.monotonic() > deadline:
                raise errors.CloudError(NAME, what, f"not done after {self.wait_s:.0f}s")
            time.sleep(self.poll_s)

    def _describe(
        self, operation: str, call: Callable[..., Any], key: str, **params: Any
    ) -> list[dict[str, Any]]:
        with calling(operation):
            return list(call(**params).get(key, []))

    # -- VPC -------------------------------------------------------------------------------
    def _find_vpc(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        if resource.read_only:
            try:
                found = self._describe(
                    "DescribeVpcs", self.ec2.describe_vpcs, "Vpcs", VpcIds=[props["vpc_id"]]
                )
            except errors.NotFound:
                return None
        else:
            found = self._describe(
                "DescribeVpcs",
                self.ec2.describe_vpcs,
                "Vpcs",
                Filters=[_name_filter(resource.name)],
            )
        raw = _one(found, "DescribeVpcs", resource.name)
        if raw is not None:
            raw["_id"] = raw["VpcId"]
        return raw

    def _create_vpc(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateVpc"):
            raw = self.ec2.create_vpc(
                CidrBlock=props["cidr_block"], TagSpecifications=_tag_spec("vpc", resource.tags)
            )["Vpc"]
        raw["_id"] = raw["VpcId"]
        if props.get("enable_dns_hostnames"):
            self._set_dns_hostnames(raw["_id"], True)
        return dict(raw)

    def _set_dns_hostnames(self, vpc_id: str, value: bool) -> None:
        with calling("ModifyVpcAttribute"):
            self.ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": value})

    def _drift_vpc(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        if resource.read_only:
            return []
        drift = _tag_drift(raw, resource.tags)
        if raw.get("CidrBlock") != props["cidr_block"]:
            drift.append(
                Drift("cidr_block", raw.get("CidrBlock"), props["cidr_block"], immutable=True)
            )
        if "enable_dns_hostnames" in props:
            with calling("DescribeVpcAttribute"):
                answer = self.ec2.describe_vpc_attribute(
                    VpcId=raw["_id"], Attribute="enableDnsHostnames"
                )
            have = bool(answer.get("EnableDnsHostnames", {}).get("Value"))
            if have != props["enable_dns_hostnames"]:
                drift.append(Drift("enable_dns_hostnames", have, props["enable_dns_hostnames"]))
        return drift

    def _fix_vpc(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        self._fix_tags(resource, props, raw, drift)
        if any(d.field == "enable_dns_hostnames" for d in drift):
            self._set_dns_hostnames(raw["_id"], bool(props["enable_dns_hostnames"]))

    def _delete_vpc(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DeleteVpc"):
            self.ec2.delete_vpc(VpcId=raw["_id"])

    # -- subnets ---------------------------------------------------------------------------
    def _find_subnet(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._describe(
            "DescribeSubnets",
            self.ec2.describe_subnets,
            "Subnets",
            Filters=[_name_filter(resource.name), {"Name": "vpc-id", "Values": [props["vpc_id"]]}],
        )
        raw = _one(found, "DescribeSubnets", resource.name)
        if raw is not None:
            raw["_id"] = raw["SubnetId"]
        return raw

    def _create_subnet(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateSubnet"):
            raw = self.ec2.create_subnet(
                VpcId=props["vpc_id"],
                CidrBlock=defs.subnet_cidr(props["cidr_block"]),
                AvailabilityZone=props["availability_zone"],
                TagSpecifications=_tag_spec("subnet", resource.tags),
            )["Subnet"]
        raw["_id"] = raw["SubnetId"]
        if props["map_public_ip_on_launch"]:
            self._map_public(raw["_id"], True)
        return dict(raw)

    def _map_public(self, subnet_id: str, value: bool) -> None:
        with calling("ModifySubnetAttribute"):
            self.ec2.modify_subnet_attribute(
                SubnetId=subnet_id, MapPublicIpOnLaunch={"Value": value}
            )

    def _drift_subnet(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any]
    ) -> list[Drift]:
        drift = _tag_drift(raw, resource.tags)
        want = {
            "cidr_block": defs.subnet_cidr(props["cidr_block"]),
            "availability_zone": props["availability_zone"],
        }
        for field, key in (("cidr_block", "CidrBlock"), ("availability_zone", "AvailabilityZone")):
            if raw.get(key) != want[field]:
                drift.append(Drift(field, raw.get(key), want[field], immutable=True))
        have = bool(raw.get("MapPublicIpOnLaunch"))
        if have != props["map_public_ip_on_launch"]:
            drift.append(Drift("map_public_ip_on_launch", have, props["map_public_ip_on_launch"]))
        return drift

    def _fix_subnet(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        self._fix_tags(resource, props, raw, drift)
        if any(d.field == "map_public_ip_on_launch" for d in drift):
            self._map_public(raw["_id"], bool(props["map_public_ip_on_launch"]))

    def _delete_subnet(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DeleteSubnet"):
            self.ec2.delete_subnet(SubnetId=raw["_id"])

    # -- internet gateway ------------------------------------------------------------------
    def _find_igw(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._describe(
            "DescribeInternetGateways",
            self.ec2.describe_internet_gateways,
            "InternetGateways",
            Filters=[_name_filter(resource.name)],
        )
        raw = _one(found, "DescribeInternetGateways", resource.name)
        if raw is not None:
            raw["_id"] = raw["InternetGatewayId"]
        return raw

    def _create_igw(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateInternetGateway"):
            raw = self.ec2.create_internet_gateway(
                TagSpecifications=_tag_spec("internet-gateway", resource.tags)
            )["InternetGateway"]
        raw["_id"] = raw["InternetGatewayId"]
        self._attach_igw(raw["_id"], props["vpc_id"])
        return dict(raw)

    def _attach_igw(self, igw: str, vpc: str) -> None:
        with calling("AttachInternetGateway"):
            self.ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)

    def _drift_igw(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        drift = _tag_drift(raw, resource.tags)
        attached = [a.get("VpcId") for a in raw.get("Attachments", [])]
        if props["vpc_id"] not in attached:
            drift.append(Drift("vpc_id", attached[0] if attached else None, props["vpc_id"]))
        return drift

    def _fix_igw(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        self._fix_tags(resource, props, raw, drift)
        if any(d.field == "vpc_id" for d in drift):
            self._attach_igw(raw["_id"], props["vpc_id"])

    def _delete_igw(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        for attachment in raw.get("Attachments", []):
            with calling("DetachInternetGateway"):
                self.ec2.detach_internet_gateway(
                    InternetGatewayId=raw["_id"], VpcId=attachment["VpcId"]
                )
        with calling("DeleteInternetGateway"):
            self.ec2.delete_internet_gateway(InternetGatewayId=raw["_id"])

    # -- elastic IPs -----------------------------------------------------------------------
    def _find_eip(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._describe(
            "DescribeAddresses",
            self.ec2.describe_addresses,
            "Addresses",
            Filters=[_name_filter(resource.name)],
        )
        raw = _one(found, "DescribeAddresses", resource.name)
        if raw is not None:
            raw["_id"] = raw["AllocationId"]
        return raw

    def _create_eip(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("AllocateAddress"):
            raw = self.ec2.allocate_address(
                Domain="vpc", TagSpecifications=_tag_spec("elastic-ip", resource.tags)
            )
        raw["_id"] = raw["AllocationId"]
        if props.get("instance_id"):
            self._associate(raw["_id"], props["instance_id"])
        return dict(raw)

    def _associate(self, allocation: str, instance: str) -> None:
        with calling("AssociateAddress"):
            self.ec2.associate_address(
                AllocationId=allocation, InstanceId=instance, AllowReassociation=True
            )

    def _drift_eip(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        drift = _tag_drift(raw, resource.tags)
        if props.get("instance_id") and raw.get("InstanceId") != props["instance_id"]:
            drift.append(Drift("instance_id", raw.get("InstanceId"), props["instance_id"]))
        return drift

    def _fix_eip(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        self._fix_tags(resource, props, raw, drift)
        if any(d.field == "instance_id" for d in drift):
            self._associate(raw["_id"], props["instance_id"])

    def _delete_eip(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        if raw.get("AssociationId"):
            with calling("DisassociateAddress"):
                self.ec2.disassociate_address(AssociationId=raw["AssociationId"])
        with calling("ReleaseAddress"):
            self.ec2.release_address(AllocationId=raw["_id"])

    # -- NAT gateway -----------------------------------------------------------------------
    def _nat_by_filters(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._describe(
            "DescribeNatGateways", self.ec2.describe_nat_gateways, "NatGateways", Filters=filters
        )

    def _find_nat(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._nat_by_filters(
            [_name_filter(resource.name), {"Name": "state", "Values": _LIVE_NAT}]
        )
        raw = _one(found, "DescribeNatGateways", resource.name)
        if raw is not None:
            raw["_id"] = raw["NatGatewayId"]
        return raw

    def _create_nat(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateNatGateway"):
            raw = self.ec2.create_nat_gateway(
                SubnetId=props["subnet_id"],
                AllocationId=props["allocation_id"],
                TagSpecifications=_tag_spec("natgateway", resource.tags),
            )["NatGateway"]
        raw["_id"] = nat_id = raw["NatGatewayId"]

        def available() -> bool:
            found = self._nat_by_filters([{"Name": "nat-gateway-id", "Values": [nat_id]}])
            state = found[0].get("State") if found else "pending"
            if state == "failed":
                raise errors.CloudError(NAME, "CreateNatGateway", f"{nat_id} failed")
            return state == "available"

        self._wait("CreateNatGateway", available)
        return dict(raw)

    def _drift_nat(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        drift = _tag_drift(raw, resource.tags)
        if raw.get("SubnetId") != props["subnet_id"]:
            drift.append(
                Drift("subnet_id", raw.get("SubnetId"), props["subnet_id"], immutable=True)
            )
        return drift

    def _delete_nat(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        nat_id = raw["_id"]
        with calling("DeleteNatGateway"):
            self.ec2.delete_nat_gateway(NatGatewayId=nat_id)

        def deleted() -> bool:
            found = self._nat_by_filters([{"Name": "nat-gateway-id", "Values": [nat_id]}])
            return not found or found[0].get("State") in ("deleted", "failed")

        self._wait("DeleteNatGateway", deleted)

    # -- route tables ----------------------------------------------------------------------
    def _find_rt(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._describe(
            "DescribeRouteTables",
            self.ec2.describe_route_tables,
            "RouteTables",
            Filters=[_name_filter(resource.name), {"Name": "vpc-id", "Values": [props["vpc_id"]]}],
        )
        raw = _one(found, "DescribeRouteTables", resource.name)
        if raw is not None:
            raw["_id"] = raw["RouteTableId"]
        return raw

    def _create_rt(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateRouteTable"):
            raw = self.ec2.create_route_table(
                VpcId=props["vpc_id"], TagSpecifications=_tag_spec("route-table", resource.tags)
            )["RouteTable"]
        raw["_id"] = raw["RouteTableId"]
        for route in props["routes"]:
            self._route("CreateRoute", raw["_id"], route)
        return dict(raw)

    def _route(self, operation: str, table: str, route: dict[str, Any]) -> None:
        target = {
            "GatewayId": route.get("gateway_id"),
            "NatGatewayId": route.get("nat_gateway_id"),
        }
        params = {k: v for k, v in target.items() if v}
        call = self.ec2.create_route if operation == "CreateRoute" else self.ec2.replace_route
        with calling(operation):
            call(RouteTableId=table, DestinationCidrBlock=route["destination"], **params)

    def _drift_rt(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        drift = _tag_drift(raw, resource.tags)
        have = {r.get("DestinationCidrBlock"): r for r in raw.get("Routes", [])}
        for route in props["routes"]:
            found = have.get(route["destination"])
            want = route.get("gateway_id") or route.get("nat_gateway_id")
            got = (found.get("GatewayId") or found.get("NatGatewayId")) if found else None
            if got != want or (found and found.get("State") == "blackhole"):
                drift.append(Drift(f"routes[{route['destination']}]", got, want))
        return drift

    def _fix_rt(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        self._fix_tags(resource, props, raw, drift)
        for d in drift:
            if not d.field.startswith("routes["):
                continue
            route = next(r for r in props["routes"] if d.field == f"routes[{r['destination']}]")
            self._route("ReplaceRoute" if d.have else "CreateRoute", raw["_id"], route)

    def _delete_rt(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DeleteRouteTable"):
            self.ec2.delete_route_table(RouteTableId=raw["_id"])

    # -- route table associations ----------------------------------------------------------
    def _find_assoc(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        tables = self._describe(
            "DescribeRouteTables",
            self.ec2.describe_route_tables,
            "RouteTables",
            Filters=[{"Name": "association.subnet-id", "Values": [props["subnet_id"]]}],
        )
        for table in tables:
            for association in table.get("Associations", []):
                if association.get("SubnetId") == props["subnet_id"]:
                    if table["RouteTableId"] != props["route_table_id"]:
                        raise errors.InvalidRequest(
                            NAME,
                            "AssociateRouteTable",
                            f"subnet {props['subnet_id']} is associated with "
                            f"{table['RouteTableId']}, not {props['route_table_id']}",
                        )
                    return {**association, "_id": association["RouteTableAssociationId"]}
        return None

    def _create_assoc(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("AssociateRouteTable"):
            answer = self.ec2.associate_route_table(
                RouteTableId=props["route_table_id"], SubnetId=props["subnet_id"]
            )
        return {"_id": answer["AssociationId"]}

    def _delete_assoc(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DisassociateRouteTable"):
            self.ec2.disassociate_route_table(AssociationId=raw["_id"])

    # -- security groups -------------------------------------------------------------------
    def _find_sg(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._describe(
            "DescribeSecurityGroups",
            self.ec2.describe_security_groups,
            "SecurityGroups",
            Filters=[
                {"Name": "group-name", "Values": [resource.name]},
                {"Name": "vpc-id", "Values": [props["vpc_id"]]},
            ],
        )
        raw = _one(found, "DescribeSecurityGroups", resource.name)
        if raw is not None:
            raw["_id"] = raw["GroupId"]
        return raw

    def _create_sg(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateSecurityGroup"):
            answer = self.ec2.create_security_group(
                GroupName=resource.name,
                Description=props["description"],
                VpcId=props["vpc_id"],
                TagSpecifications=_tag_spec("security-group", resource.tags),
            )
        return {"_id": answer["GroupId"], "GroupId": answer["GroupId"]}

    def _delete_sg(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DeleteSecurityGroup"):
            self.ec2.delete_security_group(GroupId=raw["_id"])

    # -- security group rules --------------------------------------------------------------
    def _group_rules(self, props: Props) -> dict[str, Any] | None:
        """The group with the rules this resource owns (``_managed``); ``None`` if it is gone."""
        try:
            found = self._describe(
                "DescribeSecurityGroups",
                self.ec2.describe_security_groups,
                "SecurityGroups",
                GroupIds=[props["group_id"]],
            )
        except errors.NotFound:
            return None
        if not found:
            return None
        raw = found[0]
        raw["_id"] = raw["GroupId"]
        raw["_managed"] = {
            "ingress": self._managed(_rule_set(raw.get("IpPermissions", [])), props),
            "egress": self._managed(_rule_set(raw.get("IpPermissionsEgress", [])), props),
        }
        return raw

    def _find_rules(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        raw = self._group_rules(props)
        want = {d: _desired_rules(props[d]) for d in ("ingress", "egress")}
        if raw is None or (raw["_managed"] == _DEFAULT_RULES and want != _DEFAULT_RULES):
            return None  # no group, or the group as EC2 made it: these rules were never set
        return raw

    @staticmethod
    def _managed(
        rules: set[tuple[str, int, int, str, str]], props: Props
    ) -> set[tuple[str, int, int, str, str]]:
        """The rules this resource owns: CIDR rules and rules from the layout's own groups."""
        own = set(props.get("own_groups", []))
        return {r for r in rules if r[3] == "cidr" or r[4] in own}

    def _create_rules(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        raw = self._group_rules(props)
        if raw is None:
            raise errors.NotFound(NAME, "DescribeSecurityGroups", f"group {props['group_id']}")
        drift = self._drift_rules(resource, props, raw)
        if drift:
            self._fix_rules(resource, props, raw, drift)
        return raw

    def _drift_rules(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        drift: list[Drift] = []
        for direction in ("ingress", "egress"):
            have = raw["_managed"][direction]
            want = _desired_rules(props[direction])
            if have != want:
                drift.append(Drift(direction, sorted(have - want), sorted(want - have)))
        return drift

    def _fix_rules(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        group = raw["_id"]
        for d in drift:
            ingress = d.field == "ingress"
            if d.want:
                call = (
                    self.ec2.authorize_security_group_ingress
                    if ingress
                    else self.ec2.authorize_security_group_egress
                )
                with calling(
                    "AuthorizeSecurityGroupIngress" if ingress else "AuthorizeSecurityGroupEgress"
                ):
                    call(GroupId=group, IpPermissions=[_permission(tuple(r)) for r in d.want])
            if d.have:
                call = (
                    self.ec2.revoke_security_group_ingress
                    if ingress
                    else self.ec2.revoke_security_group_egress
                )
                with calling(
                    "RevokeSecurityGroupIngress" if ingress else "RevokeSecurityGroupEgress"
                ):
                    call(GroupId=group, IpPermissions=[_permission(tuple(r)) for r in d.have])

    def _delete_rules(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        """Revoke the rules naming another group (so that group can go); CIDR rules go with
        their own group."""
        for direction in ("ingress", "egress"):
            rules = [r for r in raw["_managed"][direction] if r[3] == "group"]
            if not rules:
                continue
            ingress = direction == "ingress"
            call = (
                self.ec2.revoke_security_group_ingress
                if ingress
                else self.ec2.revoke_security_group_egress
            )
            with calling("RevokeSecurityGroupIngress" if ingress else "RevokeSecurityGroupEgress"):
                call(GroupId=raw["_id"], IpPermissions=[_permission(r) for r in sorted(rules)])

    # -- IAM -------------------------------------------------------------------------------
    def _iam_get(
        self, operation: str, call: Callable[..., Any], **params: Any
    ) -> dict[str, Any] | None:
        try:
            with calling(operation):
                return dict(call(**params))
        except errors.NotFound:
            return None
        except errors.InvalidRequest as exc:  # IAM answers NoSuchEntity (404)
            if "NoSuchEntity" in exc.message:
                return None
            raise

    def _find_role(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        answer = self._iam_get("GetRole", self.iam.get_role, RoleName=resource.name)
        if answer is None:
            return None
        return {**answer["Role"], "_id": answer["Role"]["RoleName"]}

    def _create_role(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateRole"):
            answer = self.iam.create_role(
                RoleName=resource.name, AssumeRolePolicyDocument=props["assume_role_policy"]
            )
        return {**answer["Role"], "_id": resource.name}

    def _drift_role(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> list[Drift]:
        have = _policy(raw.get("AssumeRolePolicyDocument"))
        want = json.loads(props["assume_role_policy"])
        same = equivalent_policy(have) == equivalent_policy(want)
        return [] if same else [Drift("assume_role_policy", have, want)]

    def _fix_role(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        with calling("UpdateAssumeRolePolicy"):
            self.iam.update_assume_role_policy(
                RoleName=resource.name, PolicyDocument=props["assume_role_policy"]
            )

    def _delete_role(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DeleteRole"):
            self.iam.delete_role(RoleName=resource.name)

    def _find_policy(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        answer = self._iam_get(
            "GetRolePolicy",
            self.iam.get_role_policy,
            RoleName=props["role_name"],
            PolicyName=resource.name,
        )
        return (
            None if answer is None else {**answer, "_id": f"{props['role_name']}:{resource.name}"}
        )

    def _create_policy(self, resource: ResourceDef, props: Props, *_: Any) -> dict[str, Any]:
        with calling("PutRolePolicy"):
            self.iam.put_role_policy(
                RoleName=props["role_name"],
                PolicyName=resource.name,
                PolicyDocument=props["policy"],
            )
        return {"_id": f"{props['role_name']}:{resource.name}"}

    def _drift_policy(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any]
    ) -> list[Drift]:
        have = _policy(raw.get("PolicyDocument"))
        want = json.loads(props["policy"])
        same = equivalent_policy(have) == equivalent_policy(want)
        return [] if same else [Drift("policy", have, want)]

    def _delete_policy(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DeleteRolePolicy"):
            self.iam.delete_role_policy(RoleName=props["role_name"], PolicyName=resource.name)

    def _find_profile(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        answer = self._iam_get(
            "GetInstanceProfile", self.iam.get_instance_profile, InstanceProfileName=resource.name
        )
        if answer is None:
            return None
        return {**answer["InstanceProfile"], "_id": resource.name}

    def _create_profile(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateInstanceProfile"):
            self.iam.create_instance_profile(InstanceProfileName=resource.name)
        self._add_role(resource.name, props["role_name"])
        return {"_id": resource.name}

    def _add_role(self, profile: str, role: str) -> None:
        with calling("AddRoleToInstanceProfile"):
            self.iam.add_role_to_instance_profile(InstanceProfileName=profile, RoleName=role)

    def _drift_profile(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any]
    ) -> list[Drift]:
        roles = [r["RoleName"] for r in raw.get("Roles", [])]
        return (
            [] if roles == [props["role_name"]] else [Drift("role_name", roles, props["role_name"])]
        )

    def _fix_profile(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        for role in raw.get("Roles", []):
            with calling("RemoveRoleFromInstanceProfile"):
                self.iam.remove_role_from_instance_profile(
                    InstanceProfileName=resource.name, RoleName=role["RoleName"]
                )
        self._add_role(resource.name, props["role_name"])

    def _delete_profile(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        for role in raw.get("Roles", []):
            with calling("RemoveRoleFromInstanceProfile"):
                self.iam.remove_role_from_instance_profile(
                    InstanceProfileName=resource.name, RoleName=role["RoleName"]
                )
        with calling("DeleteInstanceProfile"):
            self.iam.delete_instance_profile(InstanceProfileName=resource.name)

    # -- key pair --------------------------------------------------------------------------
    def _find_key(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        try:
            found = self._describe(
                "DescribeKeyPairs",
                self.ec2.describe_key_pairs,
                "KeyPairs",
                KeyNames=[resource.name],
            )
        except errors.NotFound:
            return None
        raw = _one(found, "DescribeKeyPairs", resource.name)
        if raw is not None:
            raw["_id"] = raw.get("KeyPairId") or resource.name
        return raw

    def _create_key(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("ImportKeyPair"):
            answer = self.ec2.import_key_pair(
                KeyName=resource.name,
                PublicKeyMaterial=props["public_key"].encode(),
                TagSpecifications=_tag_spec("key-pair", resource.tags),
            )
        return {**answer, "_id": answer.get("KeyPairId") or resource.name}

    def _delete_key(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DeleteKeyPair"):
            self.ec2.delete_key_pair(KeyName=resource.name)

    # -- volumes ---------------------------------------------------------------------------
    def _find_volume(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._describe(
            "DescribeVolumes",
            self.ec2.describe_volumes,
            "Volumes",
            Filters=[
                _name_filter(resource.name),
                {"Name": "status", "Values": ["creating", "available", "in-use"]},
            ],
        )
        raw = _one(found, "DescribeVolumes", resource.name)
        if raw is not None:
            raw["_id"] = raw["VolumeId"]
        return raw

    def _create_volume(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("CreateVolume"):
            raw = self.ec2.create_volume(
                AvailabilityZone=props["availability_zone"],
                Size=props["size_gb"],
                VolumeType=props["type"],
                TagSpecifications=_tag_spec("volume", resource.tags),
            )
        raw["_id"] = raw["VolumeId"]
        return dict(raw)

    def _drift_volume(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any]
    ) -> list[Drift]:
        drift = _tag_drift(raw, resource.tags)
        for field, key in (
            ("availability_zone", "AvailabilityZone"),
            ("size_gb", "Size"),
            ("type", "VolumeType"),
        ):
            if raw.get(key) != props[field]:
                drift.append(Drift(field, raw.get(key), props[field], immutable=True))
        return drift

    def _delete_volume(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DeleteVolume"):
            self.ec2.delete_volume(VolumeId=raw["_id"])

    def _find_attachment(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        try:
            found = self._describe(
                "DescribeVolumes",
                self.ec2.describe_volumes,
                "Volumes",
                VolumeIds=[props["volume_id"]],
            )
        except errors.NotFound:
            return None
        for volume in found:
            for attachment in volume.get("Attachments", []):
                if attachment.get("State") in ("attaching", "attached"):
                    if attachment.get("InstanceId") != props["instance_id"]:
                        raise errors.InvalidRequest(
                            NAME,
                            "AttachVolume",
                            f"{props['volume_id']} is attached to {attachment.get('InstanceId')}",
                        )
                    return {**attachment, "_id": f"{props['volume_id']}:{props['instance_id']}"}
        return None

    def _create_attachment(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("AttachVolume"):
            self.ec2.attach_volume(
                VolumeId=props["volume_id"], InstanceId=props["instance_id"], Device=props["device"]
            )
        return {"_id": f"{props['volume_id']}:{props['instance_id']}"}

    def _delete_attachment(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("DetachVolume"):
            self.ec2.detach_volume(VolumeId=props["volume_id"], InstanceId=props["instance_id"])

        def detached() -> bool:
            return self._find_attachment(resource, props) is None

        self._wait("DetachVolume", detached)

    # -- instances -------------------------------------------------------------------------
    def _instances(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with calling("DescribeInstances"):
            answer = self.ec2.describe_instances(Filters=filters)
        return [i for r in answer.get("Reservations", []) for i in r.get("Instances", [])]

    def _find_instance(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._instances(
            [_name_filter(resource.name), {"Name": "instance-state-name", "Values": _LIVE_INSTANCE}]
        )
        raw = _one(found, "DescribeInstances", resource.name)
        if raw is not None:
            raw["_id"] = raw["InstanceId"]
        return raw

    def _create_instance(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        with calling("DescribeImages"):
            images = self.ec2.describe_images(ImageIds=[props["ami"]]).get("Images", [])
        if not images:
            raise errors.InvalidRequest(NAME, "RunInstances", f"image {props['ami']} not found")
        root = images[0].get("RootDeviceName") or "/dev/xvda"
        params: dict[str, Any] = {
            "ImageId": props["ami"],
            "InstanceType": props["instance_type"],
            "MinCount": 1,
            "MaxCount": 1,
            "KeyName": props["key_name"],
            "IamInstanceProfile": {"Name": props["iam_profile"]},
            "BlockDeviceMappings": [
                {
                    "DeviceName": root,
                    "Ebs": {
                        "VolumeSize": props["root_size_gb"],
                        "VolumeType": props["root_type"],
                        "DeleteOnTermination": True,
                    },
                }
            ],
            "TagSpecifications": _tag_spec("instance", resource.tags),
        }
        user_data = bootstrap.loaded(props.get("user_data"))
        if user_data is not None:
            params["UserData"] = user_data.data  # botocore base64-encodes it
            digest = {USER_DATA_TAG: user_data.sha256}
            params["TagSpecifications"] = _tag_spec("instance", {**resource.tags, **digest})
        if "associate_public_ip" in props:
            params["NetworkInterfaces"] = [
                {
                    "DeviceIndex": 0,
                    "SubnetId": props["subnet_id"],
                    "Groups": props["security_group_ids"],
                    "AssociatePublicIpAddress": props["associate_public_ip"],
                    "DeleteOnTermination": True,
                }
            ]
        else:
            params["SubnetId"] = props["subnet_id"]
            params["SecurityGroupIds"] = props["security_group_ids"]
        with calling("RunInstances"):
            raw = self.ec2.run_instances(**params)["Instances"][0]
        raw["_id"] = raw["InstanceId"]
        if props.get("source_dest_check") is False:
            self._source_dest_check(raw["_id"], False)
        return dict(raw)

    def _source_dest_check(self, instance: str, value: bool) -> None:
        with calling("ModifyInstanceAttribute"):
            self.ec2.modify_instance_attribute(
                InstanceId=instance, SourceDestCheck={"Value": value}
            )

    def _drift_instance(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any]
    ) -> list[Drift]:
        drift = _tag_drift(raw, resource.tags)
        booted = tag_dict(raw.get("Tags")).get(USER_DATA_TAG)
        drift += user_data_drift(booted, props)
        for field, key in (
            ("ami", "ImageId"),
            ("instance_type", "InstanceType"),
            ("subnet_id", "SubnetId"),
        ):
            if raw.get(key) != props[field]:
                drift.append(Drift(field, raw.get(key), props[field], immutable=True))
        groups = sorted(g["GroupId"] for g in self._groups_of(raw))
        if groups != sorted(props["security_group_ids"]):
            drift.append(Drift("security_group_ids", groups, sorted(props["security_group_ids"])))
        if "source_dest_check" in props:
            have = raw.get("SourceDestCheck")
            if have is None:  # not in every DescribeInstances answer (moto's)
                with calling("DescribeInstanceAttribute"):
                    answer = self.ec2.describe_instance_attribute(
                        InstanceId=raw["_id"], Attribute="sourceDestCheck"
                    )
                have = answer.get("SourceDestCheck", {}).get("Value")
            if have != props["source_dest_check"]:
                drift.append(Drift("source_dest_check", have, props["source_dest_check"]))
        return drift

    @staticmethod
    def _primary_interface(raw: dict[str, Any]) -> dict[str, Any] | None:
        for eni in raw.get("NetworkInterfaces", []):
            if (eni.get("Attachment") or {}).get("DeviceIndex", 0) == 0:
                return dict(eni)
        return None

    def _groups_of(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        """The instance's groups: its primary interface's (where groups live; an instance
        launched with an interface shows none of its own in moto), else the instance's."""
        eni = self._primary_interface(raw)
        if eni is not None and eni.get("Groups"):
            return list(eni["Groups"])
        return list(raw.get("SecurityGroups", []))

    def _fix_instance(
        self, resource: ResourceDef, props: Props, raw: dict[str, Any], drift: list[Drift]
    ) -> None:
        self._fix_tags(resource, props, raw, drift)
        fields = {d.field for d in drift}
        if "security_group_ids" in fields:
            eni = self._primary_interface(raw)
            if eni is not None:
                with calling("ModifyNetworkInterfaceAttribute"):
                    self.ec2.modify_network_interface_attribute(
                        NetworkInterfaceId=eni["NetworkInterfaceId"],
                        Groups=props["security_group_ids"],
                    )
            else:
                with calling("ModifyInstanceAttribute"):
                    self.ec2.modify_instance_attribute(
                        InstanceId=raw["_id"], Groups=props["security_group_ids"]
                    )
        if "source_dest_check" in fields:
            self._source_dest_check(raw["_id"], bool(props["source_dest_check"]))

    def _delete_instance(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        with calling("TerminateInstances"):
            self.ec2.terminate_instances(InstanceIds=[raw["_id"]])

        def terminated() -> bool:
            found = self._instances([{"Name": "instance-id", "Values": [raw["_id"]]}])
            return not found or found[0].get("State", {}).get("Name") == "terminated"

        self._wait("TerminateInstances", terminated)


class AwsLayouts:
    """The AWS :class:`~cloudloop.cloud.layouts.LayoutPart` (and ``AdoptingPart``)."""

    layouts: tuple[str, ...] = defs.LAYOUTS
    state_types: Mapping[str, StateMapping] = STATE_TYPES

    def define(self, config: Any, cluster: Any, zones: list[str]) -> LayoutDef:
        return defs.define(config, cluster, zones)

    def connect(self, config: Any, section: Any) -> AwsLayoutResources:
        """A session signed with the document's credentials in its region; the worker's AWS
        section gives the endpoint, timeouts and retries."""
        assert isinstance(config, AWSClusterConfiguration)
        settings = (section if isinstance(section, AwsSettings) else AwsSettings()).model_copy(
            update={
                "region": config.provider.region,
                "access_key_id": config.provider.providerAccessKeyId,
                "secret_access_key": config.provider.providerSecretAccessKey,
                "credentials_file": None,
                "profile": None,
            }
        )
        return AwsLayoutResources(settings)
