"""The zVirt driver against the oVirt Engine emulator, started by ``LocalStack`` as a child process.

The driver reaches the emulator only through ``ovirtsdk4`` over HTTPS (the stack's CA); the test
inspects the emulator and injects faults through its admin port.
"""

from __future__ import annotations

import ast
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import ovirtsdk4 as sdk
import ovirtsdk4.types as sdk_types
import pytest
from prometheus_client import REGISTRY
from pydantic import SecretStr

import cloudloop.cloud.zvirt.driver as zvirt_package
from cloudloop.cloud import errors, models
from cloudloop.cloud.zvirt.driver import ZvirtDriver
from cloudloop.cloud.zvirt.mapping import DISCOVERY_KIND
from devstack.backends.zvirt import QUICK_TIMINGS, zvirt_settings
from devstack.ovirt_emulator import (
    OvirtEmulatorAdmin,
    OvirtEmulatorEndpoint,
)

pytestmark = pytest.mark.stack

T = TypeVar("T")
GIB = 2**30
VMS_ROUTE = "GET /ovirt-engine/api/vms"
USER_DATA = b"#cloud-config\nruncmd:\n  - echo 'hello <zvirt> & friends'\n"


@pytest.fixture(scope="module")
def endpoint(ovirt: OvirtEmulatorEndpoint) -> OvirtEmulatorEndpoint:
    assert ovirt.api_url.startswith("https://")
    return ovirt


@pytest.fixture
def admin(endpoint: OvirtEmulatorEndpoint) -> OvirtEmulatorAdmin:
    handle = OvirtEmulatorAdmin(endpoint.admin_url)
    handle.reset()
    return handle


@pytest.fixture
def driver(endpoint: OvirtEmulatorEndpoint, admin: OvirtEmulatorAdmin) -> Iterator[ZvirtDriver]:
    made = ZvirtDriver(zvirt_settings(endpoint, **QUICK_TIMINGS))
    yield made
    made.close()


def machine_spec(
    endpoint: OvirtEmulatorEndpoint, name: str | None = None, **provider: Any
) -> models.MachineSpec:
    spec: dict[str, Any] = {
        "template": endpoint.template,
        "vnicProfileID": endpoint.vnic_profile_id,
        "cpu": {"sockets": 2, "cores": 2, "threads": 1},
        "memory": 4096,
        "rootDiskSizeGb": 30,
        "nicName": "nic1",
    }
    spec.update(provider)
    return models.MachineSpec(
        name=name or f"worker-{uuid.uuid4().hex[:8]}",
        namespace="d8-cloud-instance-manager",
        cluster="zvirt",
        machine_uid=str(uuid.uuid4()),
        provider_spec=spec,
    )


def poll(check: Callable[[], T | None], *, timeout: float = 20, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def provisioned(driver: ZvirtDriver, spec: models.MachineSpec) -> models.Machine:
    def check() -> models.Machine | None:
        machine = driver.machines.get_machine(spec)
        return machine if machine is not None and machine.provisioned else None

    return poll(check, what=f"{spec.name} running with an IP")


def deleted(driver: ZvirtDriver, spec: models.MachineSpec) -> None:
    poll(lambda: driver.machines.delete_machine(spec), what=f"{spec.name} deleted")


def requests_metric(operation: str, outcome: str = "success") -> float:
    labels = {"provider": "zvirt", "operation": operation, "outcome": outcome}
    return REGISTRY.get_sample_value("cloud_api_requests_total", labels) or 0.0


# -- machines ---------------------------------------------------------------------------------
def test_create_runs_the_vm_the_spec_asks_for(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    spec = machine_spec(endpoint)

    created = driver.machines.create_machine(spec, USER_DATA)
    machine = provisioned(driver, spec)

    assert created.id == machine.id
    assert machine.provider_id == f"zvirt://{machine.id}"
    assert machine.phase == "up"
    assert machine.state is models.InstanceState.RUNNING
    assert [a.type for a in machine.addresses] == ["InternalIP"]
    assert machine.addresses[0].address.startswith("10.77.")
    vm = admin.vm(spec.name)
    assert vm is not None
    assert vm["id"] == machine.id
    assert vm["cloned"] is True
    assert vm["cluster_id"] == endpoint.cluster_id
    assert vm["cpu"] == {"sockets": 2, "cores": 2, "threads": 1}
    assert vm["memory"] == 4096 * 2**20
    assert vm["memory_policy"] == {
        "guaranteed": 4096 * 2**20,
        "max": 4096 * 2**20,
        "ballooning": False,
    }
    assert vm["type"] == "high_performance"
    assert f"machine_uid={spec.machine_uid}" in vm["description"]
    assert vm["nics"] == [
        {"name": "nic1", "vnic_profile_id": endpoint.vnic_profile_id, "mac": vm["nics"][0]["mac"]}
    ]
    [boot] = vm["disk_attachments"]
    assert boot["bootable"] and boot["active"]
    assert boot["provisioned_size"] == 30 * GIB
    assert vm["starts"] == 1
    assert vm["last_start"] == {
        "use_cloud_init": True,
        "custom_script": USER_DATA.decode(),
        "host_name": spec.name,
    }


def test_create_twice_adopts_the_first_vm(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    spec = machine_spec(endpoint)
    first = driver.machines.create_machine(spec, USER_DATA)
    second = driver.machines.create_machine(
        spec, USER_DATA
    )  # e.g. an activity retried after a crash
    provisioned(driver, spec)
    third = driver.machines.create_machine(spec, USER_DATA)

    assert first.id == second.id == third.id
    assert [vm["name"] for vm in admin.vms()] == [spec.name]
    vm = admin.vm(spec.name)
    assert vm is not None and vm["starts"] == 1
    assert len(vm["nics"]) == 1 and len(vm["disk_attachments"]) == 1


def test_create_resumes_a_vm_left_down_half_way(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    """A create that stopped after the clone (no resize, no NIC, no start) is finished later."""
    spec = machine_spec(endpoint)
    with sdk.Connection(
        url=endpoint.api_url,
        username=endpoint.username,
        password=endpoint.password,
        ca_file=str(endpoint.ca_file),
    ) as connection:
        connection.system_service().vms_service().add(
            sdk_types.Vm(
                name=spec.name,
                description=f"cloudloop machine_uid={spec.machine_uid}",
                cluster=sdk_types.Cluster(id=endpoint.cluster_id),
                template=sdk_types.Template(name=endpoint.template),
            ),
            clone=True,
        )

    driver.machines.create_machine(spec, USER_DATA)
    provisioned(driver, spec)

    vm = admin.vm(spec.name)
    assert vm is not None
    assert vm["disk_attachments"][0]["provisioned_size"] == 30 * GIB
    assert [nic["name"] for nic in vm["nics"]] == ["nic1"]
    assert vm["starts"] == 1


def test_a_same_named_vm_of_another_machine_is_never_adopted_or_deleted(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    ours = machine_spec(endpoint)
    driver.machines.create_machine(ours, USER_DATA)
    theirs = ours.model_copy(update={"machine_uid": str(uuid.uuid4())})

    with pytest.raises(errors.AlreadyExists):
        driver.machines.create_machine(theirs, USER_DATA)
    assert driver.machines.get_machine(theirs) is None
    assert driver.machines.delete_machine(theirs) is True
    assert driver.machines.get_machine(ours) is not None
    assert len(admin.vms()) == 1


def test_delete_removes_the_vm_and_its_boot_disk_and_detaches_data_disks(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    spec = machine_spec(endpoint)
    machine = driver.machines.create_machine(spec, USER_DATA)
    provisioned(driver, spec)
    with sdk.Connection(
        url=endpoint.api_url,
        username=endpoint.username,
        password=endpoint.password,
        ca_file=str(endpoint.ca_file),
    ) as connection:  # a volume attached later (as CSI would)
        attachments = (
            connection.system_service().vms_service().vm_service(machine.id)
        ).disk_attachments_service()
        attachments.add(
            sdk_types.DiskAttachment(
                disk=sdk_types.Disk(name="pvc-data", provisioned_size=5 * GIB),
                interface=sdk_types.DiskInterface.VIRTIO_SCSI,
                bootable=False,
                active=True,
            )
        )
    vm = admin.vm(spec.name)
    assert vm is not None
    boot_disk = next(a["disk_id"] for a in vm["disk_attachments"] if a["bootable"])
    assert len(vm["disk_attachments"]) == 2

    deleted(driver, spec)

    assert admin.vms() == []
    disks = admin.disks()
    assert boot_disk not in [d["id"] for d in disks]
    assert [(d["name"], d["attached_to"]) for d in disks] == [("pvc-data", None)]
    assert driver.machines.get_machine(spec) is None
    assert driver.machines.delete_machine(spec) is True  # idempotent


def test_a_stuck_vm_is_reported_failed_and_powered_off_on_delete(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    spec = machine_spec(endpoint)
    driver.machines.create_machine(spec, USER_DATA)
    provisioned(driver, spec)
    admin.set_vm_status(spec.name, "not_responding")

    machine = driver.machines.get_machine(spec)
    assert machine is not None
    assert (machine.phase, machine.state, machine.failed) == (
        "not_responding",
        models.InstanceState.UNKNOWN,
        True,
    )
    assert "not_responding" in machine.message

    deleted(driver, spec)
    assert admin.vms() == []


def test_invalid_specs_are_refused_before_any_engine_request(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    for provider in (
        {"template": ""},
        {"vnicProfileID": "not-a-uuid"},
        {"memory": "8Gi"},
        {"cpu": {"sockets": 0}},
    ):
        with pytest.raises(errors.InvalidRequest):
            driver.machines.create_machine(machine_spec(endpoint, **provider), USER_DATA)
    with pytest.raises(errors.InvalidRequest):
        driver.machines.create_machine(machine_spec(endpoint), b"\xff\xfe not text")
    assert admin.request_counts() == {}


def test_unknown_template_or_vnic_profile_is_an_invalid_request(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    with pytest.raises(errors.InvalidRequest, match="template"):
        driver.machines.create_machine(
            machine_spec(endpoint, template="no-such-template"), USER_DATA
        )
    with pytest.raises(errors.InvalidRequest, match="vNIC profile"):
        driver.machines.create_machine(
            machine_spec(endpoint, vnicProfileID=str(uuid.uuid4())), USER_DATA
        )
    assert admin.vms() == []


# -- failures ---------------------------------------------------------------------------------
def test_bad_credentials_are_auth_failures_never_not_found(
    endpoint: OvirtEmulatorEndpoint, admin: OvirtEmulatorAdmin, tmp_path: Path
) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("wrong\n")
    for settings in (
        zvirt_settings(endpoint, **QUICK_TIMINGS, password=SecretStr("wrong")),
        zvirt_settings(endpoint, **QUICK_TIMINGS, password=None, password_file=password_file),
    ):
        bad = ZvirtDriver(settings)
        spec = machine_spec(endpoint)
        with pytest.raises(errors.CloudAuthFailed):
            bad.machines.get_machine(spec)
        with pytest.raises(errors.CloudAuthFailed):
            bad.machines.delete_machine(spec)
        with pytest.raises(errors.CloudAuthFailed):
            bad.instances.list_instances([str(uuid.uuid4())])
        with pytest.raises(errors.CloudAuthFailed):
            bad.discovery.discovery_data()
        bad.close()


def test_an_expired_token_is_renewed(driver: ZvirtDriver, admin: OvirtEmulatorAdmin) -> None:
    assert driver.instances.list_instances([str(uuid.uuid4())]).found == {}
    admin.revoke_tokens()
    assert driver.instances.list_instances([str(uuid.uuid4())]).found == {}
    assert admin.request_counts()["POST /ovirt-engine/sso/oauth/token"] == 2


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("refuse", id="connection-refused"),
        pytest.param("proxy_503", id="apache-proxy-503"),
    ],
)
def test_engine_down_is_unreachable_and_the_driver_recovers(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint, mode: str
) -> None:
    spec = machine_spec(endpoint)
    driver.machines.create_machine(spec, USER_DATA)  # a logged-in connection in the pool
    unreachable_before = requests_metric("ListVms", "unreachable")
    admin.engine_down(mode)
    try:
        with pytest.raises(errors.CloudUnreachable):
            driver.machines.get_machine(spec)
        with pytest.raises(errors.CloudUnreachable):
            driver.instances.list_instances([str(uuid.uuid4())])
        with pytest.raises(errors.CloudUnreachable):
            driver.machines.delete_machine(spec)
        # Not logged in yet: the SSO call fails.
        fresh = ZvirtDriver(zvirt_settings(endpoint, **QUICK_TIMINGS))
        with pytest.raises(errors.CloudUnreachable):
            fresh.discovery.discovery_data()
        fresh.close()
    finally:
        admin.engine_up()
    assert requests_metric("ListVms", "unreachable") == unreachable_before + 3
    machine = driver.machines.get_machine(spec)
    assert machine is not None and machine.id


def test_tls_is_verified_against_the_ca_bundle(
    endpoint: OvirtEmulatorEndpoint, admin: OvirtEmulatorAdmin
) -> None:
    # The system store.
    untrusting = ZvirtDriver(zvirt_settings(endpoint, **QUICK_TIMINGS, ca_bundle=None))
    with pytest.raises(errors.CloudUnreachable):
        untrusting.instances.list_instances([str(uuid.uuid4())])
    insecure = ZvirtDriver(zvirt_settings(endpoint, **QUICK_TIMINGS, ca_bundle=None, insecure=True))
    assert insecure.instances.list_instances([str(uuid.uuid4())]).requests == 1
    insecure.close()


# -- node sync --------------------------------------------------------------------------------
def test_batched_instance_lookup_costs_one_request(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    specs = [machine_spec(endpoint, name=f"node-{i}") for i in range(6)]
    machines = [driver.machines.create_machine(spec, USER_DATA) for spec in specs]
    for spec in specs:
        provisioned(driver, spec)
    stopped = machines[0]
    with sdk.Connection(
        url=endpoint.api_url,
        username=endpoint.username,
        password=endpoint.password,
        ca_file=str(endpoint.ca_file),
    ) as connection:
        connection.system_service().vms_service().vm_service(stopped.id).stop()
    ids = [m.id for m in machines]
    missing = str(uuid.uuid4())
    provider_ids = [m.provider_id for m in machines] + [f"zvirt://{missing}"]
    admin.clear_requests()
    metric_before = requests_metric("ListVms")

    listing = driver.instances.list_instances(
        [driver.instances.instance_id_from_provider_id(p) for p in provider_ids]
    )

    assert listing.requests == 1
    assert admin.request_counts() == {VMS_ROUTE: 1}
    assert requests_metric("ListVms") == metric_before + 1
    assert sorted(listing.found) == sorted(ids)  # the missing ID is positively absent
    down = listing.found[stopped.id]
    assert (down.state, down.shut_down, down.gone) == (models.InstanceState.STOPPED, True, False)
    running = listing.found[machines[1].id]
    assert running.state is models.InstanceState.RUNNING
    assert running.provider_id == f"zvirt://{machines[1].id}"
    assert (running.zone, running.region, running.name) == ("default", "default", "node-1")
    assert [a.type for a in running.addresses] == ["InternalIP", "Hostname"]
    assert running.addresses[1].address == "node-1"

    admin.clear_requests()
    by_name = driver.instances.find_instances_by_name([s.name for s in specs] + ["node-missing"])
    assert by_name.requests == 1
    assert admin.request_counts() == {VMS_ROUTE: 1}
    assert sorted(by_name.found) == sorted(s.name for s in specs)


# -- discovery --------------------------------------------------------------------------------
def test_discovery_data_lists_storage_domains_like_deckhouse(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin
) -> None:
    data = driver.discovery.discovery_data()

    assert (data.api_version, data.kind, data.region) == (
        "deckhouse.io/v1",
        DISCOVERY_KIND,
        "default",
    )
    assert [z.name for z in data.zones] == ["default"]
    assert data.extra == {
        "storageDomains": [
            {"name": "data-fast", "isEnabled": True, "isDefaul": True},
            {"name": "data-slow", "isEnabled": False, "isDefaul": False},
            {"name": "iso", "isEnabled": False, "isDefaul": False},
            {"name": "nfs-shared", "isEnabled": True, "isDefaul": False},
        ]
    }
    assert not data.publish_zones  # the schema has no zones
    assert admin.request_counts() == {
        "POST /ovirt-engine/sso/oauth/token": 1,
        "GET /ovirt-engine/api/storagedomains": 1,
    }


# -- the emulator is reached through the SDK only ----------------------------------------------
def test_the_engine_only_ever_sees_the_sdk(
    driver: ZvirtDriver, admin: OvirtEmulatorAdmin, endpoint: OvirtEmulatorEndpoint
) -> None:
    spec = machine_spec(endpoint)
    driver.machines.create_machine(spec, USER_DATA)
    provisioned(driver, spec)
    driver.instances.list_instances([str(uuid.uuid4())])
    driver.discovery.discovery_data()
    deleted(driver, spec)

    agents = admin.user_agents()
    assert agents, "the engine saw no request"
    assert all(agent.startswith("PythonSDK/4.") for agent in agents), agents


def test_the_driver_imports_no_http_client() -> None:
    """The driver's only way to the engine is ``ovirtsdk4``: no HTTP or socket library."""
    forbidden = {"urllib", "http", "requests", "httpx", "aiohttp", "socket", "pycurl", "ssl"}
    package = Path(zvirt_package.__file__).parent
    for source in sorted(package.glob("*.py")):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{source.name} imports {name}"
