"""Which Terraform resource types of Deckhouse's AWS layouts are which layout resources.

The AWS part's ``state_types`` (:class:`~cloudloop.layouts.tfstate.StateMapping` per type), read
by adoption (``cloudloop layout adopt``) and by ``publish`` when it writes the state Secrets.
Names are upstream's (``layouts.md`` §1); the ``match`` pairs name the attribute that refers to
another resource (an association's subnet, a NAT gateway's EIP), so a resource whose ``Name``
tag differs from the layout's is still placed. ``aws_eip_association`` is the EIP's
``instance_id`` here, an ``aws_route`` one of its table's ``routes`` (taken over with the table)
and ``aws_security_group_rule`` records all fold into their group's rule set; VPC peering is not
a layout resource yet (reported). Associations and attachments have no tags upstream; the
``tags.Name`` a state written by ``publish`` gives them places them by name.
"""

from __future__ import annotations

from cloudloop.cloud.aws import layout as defs
from cloudloop.layouts.tfstate import StateMapping

STATE_TYPES: dict[str, StateMapping] = {
    "aws_vpc": StateMapping(defs.VPC, match=(("cidr_block", "cidr_block"),)),
    "aws_subnet": StateMapping(
        defs.SUBNET,
        match=(("cidr_block", "cidr_block"), ("availability_zone", "availability_zone")),
    ),
    "aws_internet_gateway": StateMapping(defs.IGW, match=(("vpc_id", "vpc_id"),)),
    "aws_eip": StateMapping(defs.EIP, match=(("instance", "instance_id"),)),
    "aws_eip_association": StateMapping(""),
    "aws_nat_gateway": StateMapping(
        defs.NAT, match=(("subnet_id", "subnet_id"), ("allocation_id", "allocation_id"))
    ),
    "aws_route_table": StateMapping(
        defs.ROUTE_TABLE,
        match=(
            ("route.0.gateway_id", "routes.0.gateway_id"),
            ("route.0.nat_gateway_id", "routes.0.nat_gateway_id"),
        ),
    ),
    # upstream's ``internet_access_public`` (0.0.0.0/0 → the IGW): a route of the table here
    "aws_route": StateMapping(""),
    "aws_route_table_association": StateMapping(
        defs.ASSOCIATION,
        match=(("subnet_id", "subnet_id"), ("route_table_id", "route_table_id")),
    ),
    "aws_security_group": StateMapping(defs.SG, names=("name", "tags.Name")),
    "aws_security_group_rule": StateMapping(
        defs.SG_RULES,
        names=(),
        match=(("security_group_id", "group_id"),),
        id="security_group_id",
        many=True,
    ),
    "aws_iam_role": StateMapping(defs.ROLE, names=("name",), id="name"),
    "aws_iam_role_policy": StateMapping(
        defs.ROLE_POLICY, names=("name",), match=(("role", "role_name"),)
    ),
    "aws_iam_instance_profile": StateMapping(
        defs.PROFILE, names=("name",), match=(("role", "role_name"),), id="name"
    ),
    "aws_key_pair": StateMapping(defs.KEY_PAIR, names=("key_name",), id="key_name"),
    "aws_ebs_volume": StateMapping(
        defs.VOLUME, match=(("availability_zone", "availability_zone"),)
    ),
    "aws_volume_attachment": StateMapping(
        defs.ATTACHMENT,
        match=(("volume_id", "volume_id"), ("instance_id", "instance_id")),
    ),
    "aws_instance": StateMapping(defs.INSTANCE, match=(("subnet_id", "subnet_id"),)),
}
