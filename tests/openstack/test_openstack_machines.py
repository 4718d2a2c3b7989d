"""The OpenStack machine part (CAPO's steps) against the emulator, through openstacksdk only.

Create → a second create adopts the same server → ACTIVE with an address → delete → the server,
its port and its root volume gone (the emulator's counts: one of each made, one of each removed).
A half-made machine (ports, no server) is resumed, a same-named server of another owner is left
alone, two of ours are an error; quotas, "No valid host" and unknown references give their kinds.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.machine_spec import (
    OWNER_KEY,
    is_quota_message,
    parse_machine_spec,
    to_machine,
)
from cloudloop.cloud.openstack.settings import NetworkingSettings
from devstack.backends.openstack import connect, machine_spec
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from tests.openstack.support import eventually

USER_DATA = b"#cloud-config\nruncmd: [echo openstack-machine]\n"


def spec_of(name: str = "", **fields: Any) -> models.MachineSpec:
    return models.MachineSpec(
        name=name or f"m-{uuid.uuid4().hex[:6]}",
        namespace="ns",
        cluster="c1",
        machine_uid=str(uuid.uuid4()),
        provider_spec=machine_spec(**fields),
        failure_domain="nova",
    )


def provisioned(driver: OpenStackDriver, spec: models.MachineSpec) -> models.Machine | None:
    machine = driver.machines.get_machine(spec)
    return machine if machine is not None and machine.provisioned else None


def rows(admin: OpenStackEmulatorAdmin, table: str, name_prefix: str) -> list[dict[str, Any]]:
    return [r for r in admin.rows(table) if str(r.get("name") or "").startswith(name_prefix)]


# -- the spec (pure) ---------------------------------------------------------------------------
def test_a_bad_spec_names_every_bad_field() -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        parse_machine_spec(
            {
                "image": {},
                "ports": [{"network": {"filter": {"name": "n"}}, "trunk": True}],
                "tags": ["a/b"],
                "rootVolume": {"sizeGiB": 0},
            }
        )
    message = caught.value.message
    for field in ("image", "ports[0].trunk", "rootVolume.sizeGiB"):
        assert field in message, message


def test_the_spec_takes_capo_fields() -> None:
    parsed = parse_machine_spec(
        machine_spec(
            rootVolume={"sizeGiB": 30, "availabilityZone": {"from": "Machine"}},
            serverGroup={"filter": {"name": "g"}},
            schedulerHintAdditionalProperties=[
                {"name": "deckhouse-zone", "value": {"type": "String", "string": "nova"}}
            ],
            serverMetadata=[{"key": "k", "value": "v"}],
            identityRef={"cloudName": "openstack", "name": "capi-user-credentials"},
            providerID="openstack:///x",
            instanceID="x",
        )
    )
    assert parsed.root_volume is not None and parsed.root_volume.size_gib == 30
    assert parsed.scheduler_hints[0].value.value() == "nova"
    with pytest.raises(errors.InvalidRequest, match="flavor"):
        parse_machine_spec({"image": {"id": "x"}})


@pytest.mark.parametrize(
    ("message", "quota"),
    [
        ("Quota exceeded for instances: Requested 1, but already used 10 of 10 instances", True),
        ("Quota exceeded for resources: ['port'].", True),
        ("VolumeLimitExceeded: Maximum number of volumes allowed (10) exceeded", True),
        ("Policy doesn't allow os_compute_api:servers:create to be performed.", False),
    ],
)
def test_quota_messages(message: str, quota: bool) -> None:
    assert is_quota_message(message) is quota


def test_a_server_in_error_is_a_failed_machine_with_novas_fault() -> None:
    server = {
        "id": "s1",
        "status": "ERROR",
        "fault": {"message": "No valid host was found. There are not enough hosts available."},
        "addresses": {"private": [{"addr": "10.0.0.5", "OS-EXT-IPS:type": "fixed"}]},
    }
    machine = to_machine(server, region="RegionOne", regional=True, networking=NetworkingSettings())
    assert machine.failed and machine.phase == "ERROR" and not machine.addresses
    assert machine.provider_id == "openstack://RegionOne/s1"
    assert "No valid host" in machine.message
    active = to_machine(
        {**server, "status": "ACTIVE"},
        region="RegionOne",
        regional=False,
        networking=NetworkingSettings(),
    )
    assert active.provisioned and active.provider_id == "openstack:///s1"
    gone = to_machine(
        {**server, "status": "ACTIVE", "OS-EXT-STS:task_state": "deleting"},
        region="",
        regional=False,
        networking=NetworkingSettings(),
    )
    assert gone.state is models.InstanceState.TERMINATED


# -- against the emulator ----------------------------------------------------------------------
def test_create_adopt_get_delete_leaves_nothing(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint
) -> None:
    conn = connect(endpoint)
    group = conn.compute.create_server_group(name="spread", policy="soft-anti-affinity")
    spec = spec_of(
        rootVolume={"sizeGiB": 3, "availabilityZone": {"from": "Machine"}},
        ports=[
            {
                "network": {"filter": {"name": "private"}},
                "securityGroups": [{"filter": {"name": "default"}}],
                "allowedAddressPairs": [{"ipAddress": "10.111.0.0/16"}],
            }
        ],
        serverGroup={"filter": {"name": "spread"}},
        schedulerHintAdditionalProperties=[
            {"name": "deckhouse-zone", "value": {"type": "String", "string": "nova"}}
        ],
        serverMetadata=[{"key": "kubernetes.io-role-deckhouse-w-nova", "value": "1"}],
    )
    first = driver.machines.create_machine(spec, USER_DATA)
    again = driver.machines.create_machine(spec, USER_DATA)  # a retried create adopts it
    assert again.id == first.id
    machine = eventually(lambda: provisioned(driver, spec), timeout=20)
    assert machine.provider_id == f"openstack:///{first.id}"
    assert machine.state is models.InstanceState.RUNNING and machine.phase == "ACTIVE"
    assert [a.type for a in machine.addresses] == ["InternalIP"]

    [server] = [s for s in admin.rows("servers") if s["id"] == first.id]
    assert server["metadata"][OWNER_KEY] == spec.machine_uid
    assert server["metadata"]["kubernetes.io-role-deckhouse-w-nova"] == "1"
    assert server["tags"] == ["use-cluster-api=1"]
    assert server["config_drive"] == "True"
    assert base64.b64decode(server["_user_data"]) == USER_DATA
    assert server["_hints"] == {"group": group.id, "deckhouse-zone": "nova"}
    assert server["_bdm"] == []  # the root volume is not delete_on_termination: ours to delete
    [port] = rows(admin, "ports", spec.name)
    assert port["name"] == f"{spec.name}-0" and port["device_id"] == first.id
    assert [p["ip_address"] for p in port["allowed_address_pairs"]] == ["10.111.0.0/16"]
    assert port["tags"] == ["use-cluster-api=1"]
    [volume] = rows(admin, "volumes", spec.name)
    assert volume["name"] == f"{spec.name}-root" and volume["size"] == 3
    assert volume["status"] == "in-use" and volume["bootable"] == "true"
    assert volume["attachments"][0]["server_id"] == first.id

    assert eventually(lambda: driver.machines.delete_machine(spec), timeout=20)
    assert driver.machines.get_machine(spec) is None
    assert driver.machines.delete_machine(spec) is True  # idempotent
    assert not rows(admin, "servers", spec.name)
    assert not rows(admin, "ports", spec.name)
    assert not rows(admin, "volumes", spec.name)
    assert admin.counts() == {
        "servers_created": 1,
        "servers_removed": 1,
        "ports_created": 1,
        "ports_removed": 1,
        "volumes_created": 1,
        "volumes_removed": 1,
    }


def test_a_half_made_machine_is_resumed_and_another_owners_server_left_alone(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint
) -> None:
    spec = spec_of()
    [stranger] = admin.seed_servers(1, prefix=spec.name)  # named <name>-0: not ours
    conn = connect(endpoint)
    image = conn.image.find_image("cirros-0.6.2-x86_64-disk")
    other = conn.compute.create_server(
        name=spec.name, flavor_id="2", image_id=image.id, networks="none"
    )  # the same name, another owner
    admin.inject("network", 500, method="PUT", route=r"/ports/.*/tags$")
    with pytest.raises(errors.CloudError):
        driver.machines.create_machine(spec, USER_DATA)  # the port is made, untagged, no server
    assert [p["name"] for p in rows(admin, "ports", spec.name + "-")] == [f"{spec.name}-0"]
    made = driver.machines.create_machine(spec, USER_DATA)
    assert made.id not in (other.id, stranger["id"])
    [port] = rows(admin, "ports", f"{spec.name}-0")
    assert port["tags"] == ["use-cluster-api=1"] and port["device_id"] == made.id
    assert admin.counts()["ports_created"] == 2  # the stranger's and ours: ours made once
    eventually(lambda: provisioned(driver, spec), timeout=20)
    assert eventually(lambda: driver.machines.delete_machine(spec), timeout=20)
    names = {s["id"] for s in admin.rows("servers")}
    assert {other.id, stranger["id"]} <= names and made.id not in names


def test_two_servers_of_ours_are_an_error(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint
) -> None:
    spec = spec_of()
    driver.machines.create_machine(spec, USER_DATA)
    conn = connect(endpoint)
    image = conn.image.find_image("cirros-0.6.2-x86_64-disk")
    conn.compute.create_server(
        name=spec.name,
        flavor_id="2",
        image_id=image.id,
        networks="none",
        metadata={OWNER_KEY: spec.machine_uid},
    )
    with pytest.raises(errors.FailedPrecondition, match="2 servers"):
        driver.machines.create_machine(spec, USER_DATA)
    with pytest.raises(errors.FailedPrecondition):
        driver.machines.get_machine(spec)
    assert eventually(lambda: driver.machines.delete_machine(spec), timeout=20)  # both go
    assert not rows(admin, "servers", spec.name)


def test_unknown_references_are_invalid_and_nothing_is_made(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin
) -> None:
    spec = spec_of(
        flavor="m9.huge",
        image={"filter": {"name": "no-such-image"}},
        ports=[{"network": {"filter": {"name": "no-such-net"}}}],
        securityGroups=[{"filter": {"name": "no-such-group"}}],
        serverGroup={"id": "no-such-group-id"},
    )
    with pytest.raises(errors.InvalidRequest) as caught:
        driver.machines.create_machine(spec, USER_DATA)
    message = caught.value.message
    for what in ("m9.huge", "no-such-image", "no-such-net", "no-such-group", "serverGroup"):
        assert what in message, message
    assert not caught.value.retryable
    assert admin.counts()["ports_created"] == 0 and admin.counts()["servers_created"] == 0
    with pytest.raises(errors.InvalidRequest, match="key_name"):
        driver.machines.create_machine(spec_of(sshKeyName="no-such-key"), USER_DATA)


@pytest.mark.parametrize(
    ("quota", "fields"),
    [
        ({"compute_instances": 0}, {}),
        ({"compute_cores": 0}, {}),
        ({"network_port": 0}, {}),
        ({"volume_gigabytes": 1}, {"rootVolume": {"sizeGiB": 5}}),
    ],
    ids=["instances", "cores", "ports", "volume-gigabytes"],
)
def test_quota_answers_are_quota_exceeded(
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    quota: dict[str, int],
    fields: dict[str, Any],
) -> None:
    admin.set_quotas(**quota)
    spec = spec_of(**fields)
    with pytest.raises(errors.QuotaExceeded, match=r"(?i)quota") as caught:
        driver.machines.create_machine(spec, USER_DATA)
    assert caught.value.retryable
    admin.clear_faults()  # the operator raised the quota: the retry resumes and finishes
    driver.machines.create_machine(spec, USER_DATA)
    eventually(lambda: provisioned(driver, spec), timeout=20)
    assert eventually(lambda: driver.machines.delete_machine(spec), timeout=20)
    counts = admin.counts()
    assert counts["servers_created"] == counts["servers_removed"] == 1


def test_no_valid_host_is_insufficient_capacity_and_the_retry_makes_a_new_server(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin
) -> None:
    admin.no_valid_host("m1.small")
    spec = spec_of()
    first = driver.machines.create_machine(spec, USER_DATA)

    def failed_machine() -> models.Machine | None:
        machine = driver.machines.get_machine(spec)
        return machine if machine is not None and machine.failed else None

    failed = eventually(failed_machine, timeout=20)
    assert "No valid host was found" in failed.message and failed.phase == "ERROR"
    admin.hold("server-delete")
    with pytest.raises(errors.InsufficientCapacity, match="No valid host") as caught:
        driver.machines.create_machine(spec, USER_DATA)  # deletes the ERROR server, keeps the port
    assert caught.value.retryable
    admin.no_valid_host("m1.small", enabled=False)
    with pytest.raises(errors.CloudError, match="still being deleted") as pending:
        driver.machines.create_machine(spec, USER_DATA)  # its port is still bound to the old server
    assert pending.value.retryable and type(pending.value) is errors.CloudError
    admin.release("server-delete")
    eventually(lambda: not any(s["id"] == first.id for s in admin.rows("servers")), timeout=20)
    second = driver.machines.create_machine(spec, USER_DATA)
    assert second.id != first.id
    eventually(lambda: provisioned(driver, spec), timeout=20)
    assert eventually(lambda: driver.machines.delete_machine(spec), timeout=20)
    assert admin.counts() == {
        "servers_created": 2,
        "servers_removed": 2,
        "ports_created": 1,
        "ports_removed": 1,
        "volumes_created": 0,
        "volumes_removed": 0,
    }
