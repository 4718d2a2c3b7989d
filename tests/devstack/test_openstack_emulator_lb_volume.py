"""The OpenStack emulator's Octavia and Cinder, driven only through ``openstacksdk``.

Octavia: ``PENDING_*`` → ``ACTIVE``/``ERROR`` with 409 "immutable" in between, fully populated
create, the status tree, the batch member update, cascade delete, held and failed transitions,
the VIP port and its floating IP. Cinder: create, types and zones, quota, attach and detach
through Nova with their intermediate states, extend (in-use from 3.42), delete rules.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from openstack import exceptions

from devstack.backends.openstack import Sdk, openstack_emulator
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from tests.openstack.support import eventually

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenStackEmulatorEndpoint]:
    with openstack_emulator(
        tmp_path_factory.mktemp("openstack-lb-volume"), gigabytes_quota=50
    ) as running:
        yield running


def subnet_id(conn: Sdk) -> str:
    return str(conn.network.find_subnet("private-subnet").id)


def status_of(conn: Sdk, lb_id: str) -> str:
    return str(conn.load_balancer.get_load_balancer(lb_id).provisioning_status)


def active(conn: Sdk, lb_id: str) -> Any:
    return conn.load_balancer.wait_for_load_balancer(lb_id, wait=10, interval=0.05)


# -- Octavia --------------------------------------------------------------------------------
def test_a_load_balancer_is_immutable_until_active(
    conn: Sdk, admin: OpenStackEmulatorAdmin
) -> None:
    # Each PENDING_* lasts 2 s here (0.2 s by default): long enough for the next SDK call to
    # meet it on a loaded runner, where the default window closed before the call got there.
    defaults = admin.set_delays()
    admin.set_delays(lb_update_s=2.0, lb_create_s=2.0)
    try:
        _immutable_until_active(conn)
    finally:
        admin.set_delays(lb_update_s=defaults["lb_update_s"], lb_create_s=defaults["lb_create_s"])


def _immutable_until_active(conn: Sdk) -> None:
    lb = conn.load_balancer.create_load_balancer(
        name="lb-1", vip_subnet_id=subnet_id(conn), tags=["kube_service_c_ns_web"]
    )
    assert lb.provisioning_status == "PENDING_CREATE"
    with pytest.raises(exceptions.ConflictException, match="is immutable and cannot be updated"):
        conn.load_balancer.create_listener(loadbalancer_id=lb.id, protocol="TCP", protocol_port=80)
    lb = active(conn, lb.id)
    assert lb.operating_status == "ONLINE" and lb.vip_address.startswith("10.0.")
    [vip] = conn.network.ports(device_id=f"lb-{lb.id}")
    assert vip.id == lb.vip_port_id and vip.device_owner == "Octavia"

    listener = conn.load_balancer.create_listener(
        loadbalancer_id=lb.id, protocol="TCP", protocol_port=80, tags=["lb-1"]
    )
    assert listener.provisioning_status == "PENDING_CREATE"
    assert status_of(conn, lb.id) == "PENDING_UPDATE"
    with pytest.raises(exceptions.ConflictException):
        conn.load_balancer.create_pool(
            listener_id=listener.id, protocol="TCP", lb_algorithm="ROUND_ROBIN"
        )
    active(conn, lb.id)
    assert conn.load_balancer.get_listener(listener.id).provisioning_status == "ACTIVE"
    with pytest.raises(exceptions.ConflictException, match="already using protocol_port 80"):
        conn.load_balancer.create_listener(loadbalancer_id=lb.id, protocol="TCP", protocol_port=80)
    # UDP on the same port is another protocol family: allowed.
    conn.load_balancer.create_listener(loadbalancer_id=lb.id, protocol="UDP", protocol_port=80)
    active(conn, lb.id)
    assert [x.id for x in conn.load_balancer.load_balancers(tags="kube_service_c_ns_web")] == [
        lb.id
    ]
    assert [x.protocol_port for x in conn.load_balancer.listeners(loadbalancer_id=lb.id)] == [
        80,
        80,
    ]


def full_load_balancer() -> dict[str, Any]:
    return {
        "listeners": [
            {
                "name": "listener_0_lb",
                "protocol": "TCP",
                "protocol_port": 80,
                "default_pool": {
                    "name": "pool_0_lb",
                    "protocol": "TCP",
                    "lb_algorithm": "ROUND_ROBIN",
                    "members": [
                        {"address": "10.0.0.10", "protocol_port": 30080, "name": "node-a"},
                        {"address": "10.0.0.11", "protocol_port": 30080, "name": "node-b"},
                    ],
                    "healthmonitor": {"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 1},
                },
            }
        ]
    }


def test_fully_populated_create_and_the_status_tree(
    conn: Sdk, admin: OpenStackEmulatorAdmin
) -> None:
    lb = conn.load_balancer.create_load_balancer(
        name="full", vip_subnet_id=subnet_id(conn), **full_load_balancer()
    )
    tree = conn.load_balancer.get(f"/lbaas/loadbalancers/{lb.id}/status").json()["statuses"][
        "loadbalancer"
    ]
    assert tree["provisioning_status"] == "PENDING_CREATE"
    [listener] = tree["listeners"]
    [pool] = listener["pools"]
    assert {m["provisioning_status"] for m in pool["members"]} == {"PENDING_CREATE"}
    active(conn, lb.id)
    tree = conn.load_balancer.get(f"/lbaas/loadbalancers/{lb.id}/status").json()["statuses"][
        "loadbalancer"
    ]
    pool = tree["listeners"][0]["pools"][0]
    assert pool["health_monitor"]["type"] == "TCP"
    assert {m["operating_status"] for m in pool["members"]} == {"ONLINE"}
    [made_pool] = conn.load_balancer.pools(loadbalancer_id=lb.id)
    assert made_pool.health_monitor_id and made_pool.listeners == [{"id": listener["id"]}]


def test_the_batch_member_update_replaces_the_set(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    lb = active(
        conn,
        conn.load_balancer.create_load_balancer(
            name="batch", vip_subnet_id=subnet_id(conn), **full_load_balancer()
        ).id,
    )
    [pool] = conn.load_balancer.pools(loadbalancer_id=lb.id)
    wanted = [
        {"address": "10.0.0.11", "protocol_port": 30080, "name": "node-b", "weight": 2},
        {"address": "10.0.0.12", "protocol_port": 30080, "name": "node-c"},
    ]
    response = conn.load_balancer.put(f"/lbaas/pools/{pool.id}/members", json={"members": wanted})
    assert response.status_code == 202
    assert status_of(conn, lb.id) == "PENDING_UPDATE"
    active(conn, lb.id)
    members = {m.address: m for m in conn.load_balancer.members(pool.id)}
    assert set(members) == {"10.0.0.11", "10.0.0.12"}
    assert members["10.0.0.11"].weight == 2
    assert {m.provisioning_status for m in members.values()} == {"ACTIVE"}


def test_delete_needs_cascade_and_takes_everything(
    conn: Sdk, admin: OpenStackEmulatorAdmin
) -> None:
    lb = active(
        conn,
        conn.load_balancer.create_load_balancer(
            name="gone", vip_subnet_id=subnet_id(conn), **full_load_balancer()
        ).id,
    )
    public = conn.network.find_network("public")
    fip = conn.network.create_ip(floating_network_id=public.id, port_id=lb.vip_port_id)
    assert fip.fixed_ip_address == lb.vip_address
    with pytest.raises(exceptions.BadRequestException, match="it has children"):
        conn.load_balancer.delete_load_balancer(lb.id)
    conn.load_balancer.delete_load_balancer(lb.id, cascade=True)
    assert status_of(conn, lb.id) == "PENDING_DELETE"
    conn.load_balancer.wait_for_delete(lb, wait=10, interval=0.05)
    assert not list(conn.load_balancer.listeners()) and not list(conn.load_balancer.pools())
    with pytest.raises(exceptions.NotFoundException):
        conn.network.get_port(lb.vip_port_id)
    assert conn.network.get_ip(fip.id).port_id is None  # the FIP stays, detached


def test_held_and_failed_transitions(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    admin.fail_next("loadbalancer")
    broken = conn.load_balancer.create_load_balancer(name="broken", vip_subnet_id=subnet_id(conn))
    eventually(lambda: status_of(conn, broken.id) == "ERROR")
    with pytest.raises(exceptions.ConflictException):
        conn.load_balancer.create_listener(
            loadbalancer_id=broken.id, protocol="TCP", protocol_port=80
        )
    conn.load_balancer.delete_load_balancer(broken.id)  # ERROR can be deleted
    conn.load_balancer.wait_for_delete(broken, wait=10, interval=0.05)

    lb = active(
        conn, conn.load_balancer.create_load_balancer(name="held", vip_subnet_id=subnet_id(conn)).id
    )
    admin.hold("loadbalancer")
    conn.load_balancer.create_listener(loadbalancer_id=lb.id, protocol="TCP", protocol_port=443)
    assert (
        eventually(lambda: admin.rows("loadbalancers"))
        and status_of(conn, lb.id) == "PENDING_UPDATE"
    )
    time.sleep(0.4)
    assert status_of(conn, lb.id) == "PENDING_UPDATE"  # stuck while held
    admin.release("loadbalancer")
    assert status_of(conn, lb.id) == "ACTIVE"
    admin.set_loadbalancer_status("held", "ERROR")
    assert status_of(conn, lb.id) == "ERROR"


@pytest.mark.parametrize(
    ("listener", "message"),
    [
        pytest.param({"protocol": "FTP", "protocol_port": 21}, "protocol", id="bad-protocol"),
        pytest.param({"protocol": "TCP", "protocol_port": 70000}, "protocol_port", id="bad-port"),
        pytest.param(
            {"protocol": "TCP", "protocol_port": 80, "timeout_client_data": -1},
            "timeout_client_data",
            id="bad-timeout",
        ),
        pytest.param(
            {"protocol": "TCP", "protocol_port": 80, "insert_headers": {"X-Forwarded-For": "true"}},
            "headers",
            id="headers-on-tcp",
        ),
        pytest.param(
            {"protocol": "TCP", "protocol_port": 80, "allowed_cidrs": ["10.0.0.1/8"]},
            "allowed_cidrs",
            id="bad-cidr",
        ),
    ],
)
def test_invalid_listeners_are_400(
    conn: Sdk, admin: OpenStackEmulatorAdmin, listener: dict[str, Any], message: str
) -> None:
    lb = active(
        conn, conn.load_balancer.create_load_balancer(name="v", vip_subnet_id=subnet_id(conn)).id
    )
    with pytest.raises(exceptions.BadRequestException, match=message):
        conn.load_balancer.create_listener(loadbalancer_id=lb.id, **listener)


def test_vip_and_provider_validation(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    with pytest.raises(exceptions.BadRequestException, match="VIP must contain"):
        conn.load_balancer.create_load_balancer(name="novip")
    with pytest.raises(exceptions.BadRequestException, match="not enabled"):
        conn.load_balancer.create_load_balancer(
            name="x", vip_subnet_id=subnet_id(conn), provider="f5"
        )
    lb = active(
        conn,
        conn.load_balancer.create_load_balancer(
            name="ip", vip_subnet_id=subnet_id(conn), vip_address="10.0.0.77"
        ).id,
    )
    assert lb.vip_address == "10.0.0.77"
    with pytest.raises(exceptions.ConflictException):
        conn.load_balancer.create_load_balancer(
            name="ip2", vip_subnet_id=subnet_id(conn), vip_address="10.0.0.77"
        )


def test_load_balancer_lists_page(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    for index in range(5):
        conn.load_balancer.create_load_balancer(
            name=f"paged-{index}", vip_subnet_id=subnet_id(conn)
        )
    names = [lb.name for lb in conn.load_balancer.load_balancers(limit=2)]
    assert sorted(names) == [f"paged-{i}" for i in range(5)]
    body = conn.load_balancer.get("/lbaas/loadbalancers?limit=2").json()
    assert body["loadbalancers_links"][0]["rel"] == "next"
    assert [lb.name for lb in conn.load_balancer.load_balancers(name="paged-3")] == ["paged-3"]


# -- Cinder ---------------------------------------------------------------------------------
def wait_volume(conn: Sdk, volume_id: str, status: str) -> Any:
    return eventually(
        lambda: (v := conn.block_storage.get_volume(volume_id)).status == status and v
    )


def test_volume_types_zones_and_quota(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    assert {t.name for t in conn.block_storage.types()} == {"__DEFAULT__", "lvmdriver-1", "ssd"}
    zones = [z.name for z in conn.block_storage.availability_zones()]
    assert zones == ["nova", "nova-b"]
    volume = conn.block_storage.create_volume(
        name="pv-1",
        size=10,
        volume_type="ssd",
        availability_zone="nova-b",
        metadata={"cinder.csi.openstack.org/cluster": "c1"},
    )
    assert volume.status == "creating"
    volume = wait_volume(conn, volume.id, "available")
    assert (volume.volume_type, volume.availability_zone, volume.size) == ("ssd", "nova-b", 10)
    # The SDK's query name for Cinder's ``metadata`` filter is ``properties``; it goes as the
    # JSON text Cinder parses (a dict would only be filtered on the client).
    mine = json.dumps({"cinder.csi.openstack.org/cluster": "c1"})
    found = list(conn.block_storage.volumes(name="pv-1", properties=mine))
    assert [v.id for v in found] == [volume.id]
    other = json.dumps({"cinder.csi.openstack.org/cluster": "c2"})
    assert not list(conn.block_storage.volumes(name="pv-1", properties=other))
    with pytest.raises(exceptions.HttpException) as raised:
        conn.block_storage.create_volume(name="too-big", size=41)
    assert raised.value.status_code == 413
    with pytest.raises(exceptions.BadRequestException, match="Availability zone"):
        conn.block_storage.create_volume(name="nowhere", size=1, availability_zone="mars")


def test_attach_and_detach_through_nova(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    [made] = admin.seed_servers(1, prefix="vm")
    volume = wait_volume(
        conn, conn.block_storage.create_volume(name="pv-2", size=1).id, "available"
    )
    attachment = conn.compute.create_volume_attachment(made["id"], volume_id=volume.id)
    assert attachment.device == "/dev/vdb"
    assert conn.block_storage.get_volume(volume.id).status in ("reserved", "attaching")
    assert [a.volume_id for a in conn.compute.volume_attachments(made["id"])] == [volume.id]
    volume = wait_volume(conn, volume.id, "in-use")
    [attached] = volume.attachments
    assert attached["server_id"] == made["id"] and attached["device"] == "/dev/vdb"
    # as real Cinder writes them (no zone; gophercloud's JSONRFC3339MilliNoZ refuses a "Z")
    raw = conn.block_storage.get(f"/volumes/{volume.id}").json()["volume"]
    for stamp in (raw["created_at"], raw["updated_at"], raw["attachments"][0]["attached_at"]):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}", stamp), stamp
    with pytest.raises(exceptions.BadRequestException, match="Invalid volume"):
        conn.block_storage.delete_volume(volume)
    second = conn.compute.create_volume_attachment(
        made["id"],
        volume_id=wait_volume(
            conn, conn.block_storage.create_volume(name="pv-3", size=1).id, "available"
        ).id,
    )
    assert second.device == "/dev/vdc"

    conn.compute.delete_volume_attachment(made["id"], volume.id)
    assert conn.block_storage.get_volume(volume.id).status == "detaching"
    wait_volume(conn, volume.id, "available")
    with pytest.raises(exceptions.NotFoundException):
        conn.compute.delete_volume_attachment(made["id"], volume.id, ignore_missing=False)
    conn.block_storage.delete_volume(volume)
    eventually(lambda: not list(conn.block_storage.volumes(name="pv-2")))


def test_extend_available_and_in_use(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    [made] = admin.seed_servers(1, prefix="grow")
    volume = wait_volume(
        conn, conn.block_storage.create_volume(name="pv-4", size=1).id, "available"
    )
    conn.block_storage.extend_volume(volume, 2)
    assert conn.block_storage.get_volume(volume.id).status == "extending"
    assert wait_volume(conn, volume.id, "available").size == 2
    with pytest.raises(exceptions.BadRequestException, match="greater than current size"):
        conn.block_storage.extend_volume(volume, 2)

    conn.compute.create_volume_attachment(made["id"], volume_id=volume.id)
    wait_volume(conn, volume.id, "in-use")
    response = conn.block_storage.post(
        f"/volumes/{volume.id}/action", json={"os-extend": {"new_size": 3}}, microversion="3.0"
    )
    assert response.status_code == 400  # in-use needs 3.42
    conn.block_storage.extend_volume(volume, 3)  # the SDK negotiates the newest microversion
    assert wait_volume(conn, volume.id, "in-use").size == 3


def test_injected_volume_failures(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    admin.fail_next("volume")
    volume = conn.block_storage.create_volume(name="pv-err", size=1)
    wait_volume(conn, volume.id, "error")
    conn.block_storage.delete_volume(volume)  # error volumes can be deleted
    admin.fail_next("volume-extend")
    good = wait_volume(conn, conn.block_storage.create_volume(name="pv-ok", size=1).id, "available")
    conn.block_storage.extend_volume(good, 5)
    wait_volume(conn, good.id, "error_extending")


def test_slow_transitions_from_the_admin_api(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    admin.set_delays(lb_create_s=1.5)
    lb = conn.load_balancer.create_load_balancer(name="slow", vip_subnet_id=subnet_id(conn))
    started = time.monotonic()
    active(conn, lb.id)
    assert time.monotonic() - started >= 1.2
    assert admin.set_delays()["lb_create_s"] == 1.5
