"""Makes an OpenStack layout's resources as the upstream Terraform modules make them, with raw
openstacksdk calls, and writes their Terraform v4 states as dhctl keeps them (base state + one
per node, the server's ``user_data`` secret in it): the adoption tests' upstream cluster."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from cloudloop.cloud.openstack import layout as defs
from cloudloop.layouts.model import LayoutDef, ResourceDef
from tests.layouts.support import TerraformStates

#: The node's cloud-config a real state holds: it must never leave the file.
USER_DATA = "os-bootstrap-token-s3cr3t"


class Terraform(TerraformStates):
    """Makes the layout's resources with raw openstacksdk calls, as the upstream modules do, and
    records each in a v4 state (one per module)."""

    provider = 'provider["registry.terraform.io/terraform-provider-openstack/openstack"]'

    def __init__(self, sdk: Any, layout: LayoutDef) -> None:
        super().__init__(layout)
        self.sdk = sdk

    def props(self, resource: ResourceDef) -> dict[str, Any]:
        def value(v: Any) -> Any:
            if isinstance(v, dict) and "$ref" in v:
                output = v.get("output", "id")
                return self.ids[v["$ref"] if output == "id" else f"{v['$ref']}#{output}"]
            if isinstance(v, dict):
                return {k: value(x) for k, x in v.items()}
            if isinstance(v, list):
                return [value(x) for x in v]
            return v

        return {k: value(v) for k, v in resource.properties.items()}

    def make(self, names: dict[str, str]) -> None:
        """Every resource of the layout; ``names`` (key → name) as upstream names some."""
        for module, r in self.resources():
            p = self.props(r)
            own = {defs.PORT: p.get("port_name"), defs.FLOATING_IP: p.get("description")}.get(
                r.kind, r.name
            )
            name = names.get(r.key, own)
            getattr(self, "_" + r.kind.split(".")[1])(module, r, p, name)

    # lookups: what the cloud has
    def _network(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        if r.read_only:  # by name, or the network of a subnet looked up
            self.ids[r.key] = p.get("network_id") or (
                self.sdk.network.find_network(p["name"], ignore_missing=False).id
            )
            return
        net = self.sdk.network.create_network(name=name, admin_state_up=True)
        self.ids[r.key] = net.id
        self.record(module, "openstack_networking_network_v2", "internal", id=net.id, name=name)

    def _image(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        self.ids[r.key] = self.sdk.image.find_image(p["name"], ignore_missing=False).id

    def _flavor(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        self.ids[r.key] = self.sdk.compute.find_flavor(p["name"], ignore_missing=False).id

    def _security_group(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        group = self.sdk.network.create_security_group(name=name, description="")
        self.ids[r.key] = group.id
        self.record(module, "openstack_networking_secgroup_v2", "kube", id=group.id, name=name)

    def _security_group_rules(
        self, module: str, r: ResourceDef, p: dict[str, Any], name: str
    ) -> None:
        self.ids[r.key] = p["group_id"]
        for index, rule in enumerate(p["ingress"]):
            made = self.sdk.network.create_security_group_rule(
                security_group_id=p["group_id"], **{k: v for k, v in rule.items() if v is not None}
            )
            self.record(
                module,
                "openstack_networking_secgroup_rule_v2",
                f"rule_{index}",
                id=made.id,
                security_group_id=p["group_id"],
            )

    def _keypair(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        self.sdk.compute.create_keypair(name=name, public_key=p["public_key"])
        self.ids[r.key] = name
        self.record(module, "openstack_compute_keypair_v2", "ssh", id=name, name=name)

    def _subnet(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        if r.read_only:
            subnet = self.sdk.network.find_subnet(p["name"], ignore_missing=False)
            self.ids[r.key] = subnet.id
            self.ids[f"{r.key}#network_id"] = subnet.network_id
            return
        subnet = self.sdk.network.create_subnet(name=name, **p)
        self.ids[r.key] = subnet.id
        self.record(
            module,
            "openstack_networking_subnet_v2",
            "internal",
            id=subnet.id,
            name=name,
            network_id=p["network_id"],
            cidr=p["cidr"],
        )

    def _router(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        router = self.sdk.network.create_router(
            name=name, external_gateway_info={"network_id": p["external_network_id"]}
        )
        self.ids[r.key] = router.id
        self.record(
            module,
            "openstack_networking_router_v2",
            "router",
            id=router.id,
            name=name,
            external_network_id=p["external_network_id"],
        )

    def _router_interface(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        router = self.sdk.network.get_router(p["router_id"])
        made = self.sdk.network.add_interface_to_router(router, subnet=p["subnet_id"])
        self.ids[r.key] = made["port_id"]
        self.record(
            module,
            "openstack_networking_router_interface_v2",
            "router",
            id=made["port_id"],
            router_id=p["router_id"],
            subnet_id=p["subnet_id"],
        )

    def _port(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        port = self.sdk.network.create_port(
            name=name,
            network_id=p["network_id"],
            security_group_ids=p["security_group_ids"],
            allowed_address_pairs=[{"ip_address": ip} for ip in p.get("allowed_address_pairs", [])],
            **({"fixed_ips": [{"subnet_id": p["subnet_id"]}]} if p.get("subnet_id") else {}),
        )
        self.ids[r.key] = port.id
        self.record(
            module,
            "openstack_networking_port_v2",
            "port",
            id=port.id,
            name=name,
            network_id=p["network_id"],
        )

    def _volume(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        volume = self.sdk.block_storage.create_volume(
            name=name,
            size=p["size"],
            availability_zone=p["availability_zone"],
            volume_type=p["volume_type"],
            metadata=p["metadata"],
            **({"image_id": p["image_id"]} if p.get("image_id") else {}),
            **({"description": p["description"]} if p.get("description") else {}),
        )
        self.sdk.block_storage.wait_for_status(volume, "available", wait=60, interval=0.2)
        self.ids[r.key] = volume.id
        self.record(
            module,
            "openstack_blockstorage_volume_v3",
            "volume",
            id=volume.id,
            name=name,
            availability_zone=p["availability_zone"],
        )

    def _server(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        boot: dict[str, Any] = (
            {
                "block_device_mapping_v2": [
                    {
                        "uuid": p["root_volume_id"],
                        "boot_index": 0,
                        "source_type": "volume",
                        "destination_type": "volume",
                        "delete_on_termination": False,
                    }
                ]
            }
            if p.get("root_volume_id")
            else {"image_id": p["image_id"]}
        )
        server = self.sdk.compute.create_server(
            name=name,
            flavor_id=p["flavor_id"],
            key_name=p["key_name"],
            availability_zone=p["availability_zone"],
            metadata=p["metadata"],
            networks=[{"port": port} for port in p.get("ports", [])]
            + [{"uuid": net} for net in p.get("networks", [])],
            user_data=base64.b64encode(USER_DATA.encode()).decode(),
            **boot,
        )
        self.sdk.compute.wait_for_server(server, wait=60, interval=0.2)
        self.ids[r.key] = server.id
        self.record(
            module,
            "openstack_compute_instance_v2",
            "node",
            id=server.id,
            name=name,
            availability_zone=p["availability_zone"],
            user_data=USER_DATA,
            network=[{"port": port, "uuid": "", "name": ""} for port in p.get("ports", [])]
            + [{"port": "", "uuid": net, "name": ""} for net in p.get("networks", [])],
        )

    def _volume_attachment(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        self.sdk.compute.create_volume_attachment(p["server_id"], volume_id=p["volume_id"])
        volume = self.sdk.block_storage.get_volume(p["volume_id"])
        self.sdk.block_storage.wait_for_status(volume, "in-use", wait=60, interval=0.2)
        cloud_id = f"{p['server_id']}/{p['volume_id']}"
        self.ids[r.key] = cloud_id
        self.record(
            module,
            "openstack_compute_volume_attach_v2",
            "kubernetes_data",
            id=cloud_id,
            instance_id=p["server_id"],
            volume_id=p["volume_id"],
        )

    def _floating_ip(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        fip = self.sdk.network.create_ip(
            floating_network_id=p["floating_network_id"], description=name
        )
        self.sdk.network.update_ip(fip, port_id=p["port_id"])
        self.ids[r.key] = fip.id
        self.record(
            module,
            "openstack_networking_floatingip_v2",
            "master",
            id=fip.id,
            floating_network_id=p["floating_network_id"],
        )
        self.record(
            module,
            "openstack_networking_floatingip_associate_v2",
            "master",
            id=fip.id,
            port_id=p["port_id"],
        )

    def write_states(self, folder: Path) -> list[str]:
        """Every module's state as a file in ``folder``; the ``adopt`` sources (base's path,
        ``<node>=<path>`` for each node)."""
        sources = []
        for module in self.layout.modules:
            if module.id not in self.states:
                continue
            file = folder / f"{module.id}-tf-state.json"
            file.write_text(self.state(module.id))
            sources.append(str(file) if module.id == "base" else f"{module.node_name}={file}")
        return sources
