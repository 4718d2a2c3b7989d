"""Which Terraform resource types of Deckhouse's OpenStack layouts are which layout resources.

The OpenStack part's ``state_types`` (:class:`~cloudloop.layouts.tfstate.StateMapping` per
type), read by adoption (``cloudloop layout adopt``) and by ``publish`` when it writes the state
Secrets. Types are upstream's (``layouts.md`` §2); Terraform's OpenStack resources carry their
name in ``name``. Ports are placed by (name, network) — upstream's master ports have no name, so
the network and the server or floating IP that refers to them decide; floating IPs (no name
upstream) by the port they are bound to, and ``openstack_networking_floatingip_associate_v2`` is
that binding (the floating IP's ``port_id`` here); ``openstack_compute_floatingip_v2`` is Nova's
proxy of such a floating IP (the same ID; Deckhouse's master module) and
``openstack_compute_floatingip_associate_v2`` its binding to the server. A key pair's ID is its
name; security group rules all fold into their group's rule set (``id`` = the group); a router
interface's ID is its port, a volume attachment's ``<server>/<volume>``. A state ``publish``
writes names a port and a floating IP by the definition's name (``<port>@<network>``,
``<node>@<pool>``), which places them before the ``match`` pairs are tried.
"""

from __future__ import annotations

from cloudloop.cloud.openstack import layout as defs
from cloudloop.layouts.tfstate import StateMapping

NAMES = ("name",)

STATE_TYPES: dict[str, StateMapping] = {
    "openstack_networking_network_v2": StateMapping(defs.NETWORK, names=NAMES),
    "openstack_networking_subnet_v2": StateMapping(
        defs.SUBNET, names=NAMES, match=(("network_id", "network_id"), ("cidr", "cidr"))
    ),
    "openstack_networking_router_v2": StateMapping(
        defs.ROUTER, names=NAMES, match=(("external_network_id", "external_network_id"),)
    ),
    "openstack_networking_router_interface_v2": StateMapping(
        defs.INTERFACE,
        names=(),
        match=(("router_id", "router_id"), ("subnet_id", "subnet_id")),
    ),
    "openstack_networking_secgroup_v2": StateMapping(defs.SG, names=NAMES),
    "openstack_networking_secgroup_rule_v2": StateMapping(
        defs.SG_RULES,
        names=(),
        match=(("security_group_id", "group_id"),),
        id="security_group_id",
        many=True,
    ),
    "openstack_compute_keypair_v2": StateMapping(defs.KEYPAIR, names=NAMES, id="name"),
    "openstack_compute_servergroup_v2": StateMapping(defs.SERVER_GROUP, names=NAMES),
    "openstack_networking_port_v2": StateMapping(
        defs.PORT,
        names=NAMES,
        match=(("name", "port_name"), ("network_id", "network_id")),
    ),
    "openstack_blockstorage_volume_v3": StateMapping(
        defs.VOLUME, names=NAMES, match=(("availability_zone", "availability_zone"),)
    ),
    "openstack_blockstorage_volume_v2": StateMapping(
        defs.VOLUME, names=NAMES, match=(("availability_zone", "availability_zone"),)
    ),
    "openstack_compute_volume_attach_v2": StateMapping(
        defs.ATTACHMENT,
        names=(),
        match=(("volume_id", "volume_id"), ("instance_id", "server_id")),
    ),
    "openstack_compute_instance_v2": StateMapping(
        defs.SERVER,
        names=NAMES,
        match=(("availability_zone", "availability_zone"), ("network.0.port", "ports.0")),
    ),
    "openstack_networking_floatingip_v2": StateMapping(
        defs.FLOATING_IP,
        names=("description",),
        match=(("port_id", "port_id"), ("description", "description")),
    ),
    # Nova's proxy of the same Neutron floating IP (its ID is Neutron's): Deckhouse's master
    # module; no name, so the one of its node's module, or the port it is bound to, places it
    "openstack_compute_floatingip_v2": StateMapping(
        defs.FLOATING_IP, names=(), match=(("port_id", "port_id"),)
    ),
    "openstack_networking_floatingip_associate_v2": StateMapping(""),
    "openstack_compute_floatingip_associate_v2": StateMapping(""),
}
