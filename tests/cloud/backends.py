"""One real test backend per provider, for the conformance suite.

A :class:`Backend` hands the suite a driver against the cloud's test backend (moto, the DVP
parent cluster with its simulator, the oVirt Engine emulator), one against an endpoint that does
not answer, one with wrong credentials, and the calls each declared capability is proved with.

Rules: a new cloud joins the suite with one ``Backend`` builder in :data:`BACKENDS` (built
lazily, so a run that selects one provider starts only its backend); every call below goes
through the driver, never around it.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from pydantic import SecretStr

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.driver import Capability, CloudDriver
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.cloud.zvirt.driver import ZvirtDriver
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from devstack.backends.aws import aws_settings, create_cluster_network, launch_instances
from devstack.backends.dvp import dvp_settings
from devstack.backends.vsphere import machine_spec as vsphere_machine_spec
from devstack.backends.vsphere import vsphere_settings
from devstack.backends.zvirt import machine_spec as zvirt_machine_spec
from devstack.backends.zvirt import zvirt_settings
from devstack.local import LocalStack
from devstack.machine_fixtures import dvp_machine_spec
from devstack.openstack_emulator import OpenStackEmulatorEndpoint
from devstack.ovirt_emulator import OvirtEmulatorEndpoint
from devstack.process import free_port
from devstack.vcsim import VcsimEndpoint
from tests.support.parts import has

Call = Callable[[CloudDriver], object]

#: A port nobody listens on: every request is refused at once.
DEAD = f"127.0.0.1:{free_port()}"


@dataclass
class Backend:
    name: str
    driver: Callable[[], CloudDriver]
    unreachable: Callable[[], CloudDriver]
    wrong_credentials: Callable[[], CloudDriver]
    #: A cheap read every configured driver of this cloud can make (the reachability probe).
    probe: Call
    #: Per declared capability: a call that must succeed against the backend.
    proves: dict[Capability, Call] = field(default_factory=dict)
    #: Per declared capability: a lookup of something that does not exist; it must answer
    #: absence (``None``, empty, or ``NotFound``), never a different error.
    unknown: dict[Capability, Call] = field(default_factory=dict)


def _for_cluster(driver: CloudDriver, cluster: str) -> CloudDriver:
    """``driver`` serving ``cluster``, as ``Provider.make_driver`` sets it."""
    driver.cluster = cluster
    return driver


def absent_machine(name: str, provider_spec: dict[str, Any] | None = None) -> models.MachineSpec:
    """A machine no VM was made for (a fresh UID): ``get_machine`` must answer ``None``."""
    return models.MachineSpec(
        name=name,
        namespace="default",
        cluster="conformance",
        machine_uid=str(uuid.uuid4()),
        provider_spec=provider_spec or {},
    )


# -- AWS: moto, and a second moto that checks credentials (IAM auth on, tests/cloud/conftest.py)
def _aws_settings(endpoint: str, key: str = "testing", timeout_s: float = 30) -> AwsSettings:
    return aws_settings(endpoint, access_key_id=SecretStr(key), timeout_s=timeout_s, max_attempts=1)


def _aws_instance(driver: CloudDriver) -> str:
    ec2 = cast(AwsDriver, driver).session.client("ec2")
    [instance] = launch_instances(ec2, 1)
    return str(instance["InstanceId"])


def _aws_instances(driver: CloudDriver) -> object:
    instance_id = _aws_instance(driver)
    listing = has(driver.instances).list_instances([instance_id])
    assert instance_id in listing.found
    return listing


def _aws_routes(driver: CloudDriver, cluster: str) -> object:
    create_cluster_network(cast(AwsDriver, driver).session.client("ec2"), cluster, route_table=True)
    return has(driver.routes).list_routes(cluster)


def aws_backend(request: pytest.FixtureRequest) -> Backend:
    stack: LocalStack = request.getfixturevalue("stack")
    checking: str = request.getfixturevalue("authenticating_moto")
    cluster = f"conformance-{uuid.uuid4().hex[:6]}"
    return Backend(
        name="aws",
        driver=lambda: _for_cluster(AwsDriver(_aws_settings(stack.moto_endpoint)), cluster),
        # A dead port is refused at once; the generous read timeout is for a loaded machine,
        # where moto can take seconds to answer (a timeout is not the answer being tested).
        unreachable=lambda: AwsDriver(_aws_settings(f"http://{DEAD}")),
        wrong_credentials=lambda: AwsDriver(_aws_settings(checking, key="AKIAWRONGWRONGWRONG")),
        probe=lambda d: has(d.discovery).zones(),
        proves={
            Capability.INSTANCES: _aws_instances,
            Capability.DISCOVERY: lambda d: has(d.discovery).discovery_data(),
            Capability.ROUTES: lambda d: _aws_routes(d, cluster),
            Capability.LOAD_BALANCERS: lambda d: has(d.load_balancers).get_load_balancer(
                "a" + uuid.uuid4().hex[:20]
            ),
            Capability.VOLUMES: lambda d: has(d.volumes).find_volume("pvc-conformance", cluster),
            Capability.SNAPSHOTS: lambda d: has(d.snapshots).list_snapshots(cluster),
            Capability.MACHINES: lambda d: has(d.machines).get_machine(absent_machine("absent-vm")),
        },
        unknown={
            Capability.INSTANCES: lambda d: (
                has(d.instances).list_instances(["i-0123456789abcdef0"]).found
            ),
            Capability.MACHINES: lambda d: has(d.machines).get_machine(absent_machine("absent-vm")),
            Capability.LOAD_BALANCERS: lambda d: has(d.load_balancers).get_load_balancer(
                "a" + "0" * 31
            ),
            Capability.VOLUMES: lambda d: has(d.volumes).get_volume("vol-0123456789abcdef0"),
            Capability.SNAPSHOTS: lambda d: has(d.snapshots).get_snapshot("snap-0123456789abcdef0"),
        },
    )


# -- DVP: the parent cluster (a real kube-apiserver) with the simulator ---------------------
def _kubeconfig_with_token(kubeconfig: Path, token: str) -> str:
    """The same cluster and CA, but a user that presents only ``token``."""
    document: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    for user in document.get("users", []):
        user["user"] = {"token": token}
    return base64.b64encode(yaml.safe_dump(document).encode()).decode()


def _kubeconfig_at(kubeconfig: Path, server: str) -> str:
    document: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    for cluster in document.get("clusters", []):
        cluster["cluster"]["server"] = server
    return base64.b64encode(yaml.safe_dump(document).encode()).decode()


def dvp_backend(request: pytest.FixtureRequest) -> Backend:
    from devstack.dvp_simulator import DvpParent

    parent: DvpParent = request.getfixturevalue("dvp_parent")
    namespace = parent.new_namespace("conformance")

    def settings(**overrides: Any) -> DvpSettings:
        values: dict[str, Any] = {"cluster_uuid": "conformance", "timeout_s": 30, **overrides}
        return dvp_settings(parent, namespace, **values)

    def machine(name: str) -> models.MachineSpec:
        return models.MachineSpec(
            name=name,
            namespace="default",
            cluster="conformance",
            machine_uid=str(uuid.uuid4()),
            provider_spec=dvp_machine_spec(),
        )

    return Backend(
        name="dvp",
        driver=lambda: DvpDriver(settings()),
        unreachable=lambda: DvpDriver(
            settings(
                kubeconfig=None,
                kubeconfig_base64=SecretStr(_kubeconfig_at(parent.kubeconfig, f"https://{DEAD}")),
            )
        ),
        wrong_credentials=lambda: DvpDriver(
            settings(
                kubeconfig=None,
                kubeconfig_base64=SecretStr(
                    _kubeconfig_with_token(parent.kubeconfig, "not-a-valid-token")
                ),
            )
        ),
        probe=lambda d: has(d.instances).list_instances(["probe"]),
        proves={
            Capability.INSTANCES: lambda d: has(d.instances).list_instances(["absent-vm"]),
            Capability.MACHINES: lambda d: has(d.machines).get_machine(machine("absent-vm")),
            Capability.DISCOVERY: lambda d: has(d.discovery).discovery_data(),
            Capability.LOAD_BALANCERS: lambda d: has(d.load_balancers).get_load_balancer(
                "a" + "0" * 31
            ),
            Capability.VOLUMES: lambda d: has(d.volumes).find_volume(
                "pvc-conformance", "conformance"
            ),
        },
        unknown={
            Capability.INSTANCES: lambda d: has(d.instances).list_instances(["absent-vm"]).found,
            Capability.MACHINES: lambda d: has(d.machines).get_machine(machine("absent-vm")),
            Capability.LOAD_BALANCERS: lambda d: has(d.load_balancers).get_load_balancer(
                "a" + "0" * 31
            ),
            Capability.VOLUMES: lambda d: has(d.volumes).get_volume("absent-disk"),
        },
    )


# -- zVirt: the oVirt Engine emulator, through ovirtsdk4 -------------------------------------
def zvirt_backend(request: pytest.FixtureRequest) -> Backend:
    endpoint: OvirtEmulatorEndpoint = request.getfixturevalue("ovirt_engine")

    def settings(**overrides: Any) -> ZvirtSettings:
        timings = {"timeout_s": 30, "wait_timeout_s": 10, "poll_interval_s": 0.05}
        return zvirt_settings(endpoint, **{**timings, **overrides})

    def machine(name: str) -> models.MachineSpec:
        return models.MachineSpec(
            name=name,
            namespace="default",
            cluster="conformance",
            machine_uid=str(uuid.uuid4()),
            provider_spec=zvirt_machine_spec(endpoint),
        )

    return Backend(
        name="zvirt",
        driver=lambda: ZvirtDriver(settings()),
        unreachable=lambda: ZvirtDriver(
            settings(api_url=f"https://{DEAD}/ovirt-engine/api", ca_bundle=None, insecure=True)
        ),
        wrong_credentials=lambda: ZvirtDriver(settings(password=SecretStr("wrong-password"))),
        probe=lambda d: has(d.instances).list_instances(["00000000-0000-0000-0000-000000000001"]),
        proves={
            Capability.INSTANCES: lambda d: has(d.instances).find_instances_by_name(["absent-vm"]),
            Capability.MACHINES: lambda d: has(d.machines).get_machine(machine("absent-vm")),
            Capability.DISCOVERY: lambda d: has(d.discovery).discovery_data(),
            Capability.VOLUMES: lambda d: has(d.volumes).find_volume(
                "pvc-conformance", "conformance"
            ),
        },
        unknown={
            Capability.INSTANCES: lambda d: (
                has(d.instances).list_instances(["00000000-0000-0000-0000-00000000abcd"]).found
            ),
            Capability.MACHINES: lambda d: has(d.machines).get_machine(machine("absent-vm")),
            Capability.VOLUMES: lambda d: has(d.volumes).get_volume(
                "00000000-0000-0000-0000-00000000abcd"
            ),
        },
    )


# -- vSphere: vcsim (govmomi), through pyvmomi and the tagging REST paths -------------------
def vsphere_backend(request: pytest.FixtureRequest) -> Backend:
    endpoint: VcsimEndpoint = request.getfixturevalue("vcsim_server")

    def settings(**overrides: Any) -> VsphereSettings:
        timings = {"timeout_s": 30, "wait_timeout_s": 10, "poll_interval_s": 0.05}
        return vsphere_settings(endpoint, **{**timings, **overrides})

    unknown_uuid = "00000000-0000-0000-0000-00000000abcd"

    def machine(name: str) -> models.MachineSpec:
        return models.MachineSpec(
            name=name,
            namespace="default",
            cluster="conformance",
            machine_uid=str(uuid.uuid4()),
            provider_spec=vsphere_machine_spec(),
        )

    return Backend(
        name="vsphere",
        driver=lambda: VsphereDriver(settings()),
        unreachable=lambda: VsphereDriver(settings(server=DEAD, ca_bundle=None, insecure=True)),
        wrong_credentials=lambda: VsphereDriver(settings(password=SecretStr("wrong-password"))),
        probe=lambda d: has(d.instances).list_instances([unknown_uuid]),
        proves={
            Capability.INSTANCES: lambda d: has(d.instances).find_instances_by_name(
                ["conformance-a"]
            ),
            Capability.MACHINES: lambda d: has(d.machines).get_machine(machine("absent-vm")),
            Capability.DISCOVERY: lambda d: has(d.discovery).discovery_data(),
            Capability.VOLUMES: lambda d: has(d.volumes).find_volume(
                "pvc-conformance", "conformance"
            ),
        },
        unknown={
            Capability.INSTANCES: lambda d: has(d.instances).list_instances([unknown_uuid]).found,
            Capability.MACHINES: lambda d: has(d.machines).get_machine(machine("absent-vm")),
            Capability.VOLUMES: lambda d: has(d.volumes).get_volume("datastore-1:00000000-abcd"),
        },
    )


# -- OpenStack: the OpenStack API emulator, through openstacksdk ---------------------------
def openstack_backend(request: pytest.FixtureRequest) -> Backend:
    from devstack.openstack_emulator import OpenStackEmulatorAdmin
    from tests.openstack.support import quick_settings

    endpoint: OpenStackEmulatorEndpoint = request.getfixturevalue("openstack_cloud")
    [server] = OpenStackEmulatorAdmin(endpoint.admin_url).seed_servers(1, prefix="conformance")

    def settings(**connection: Any) -> OpenStackSettings:
        return quick_settings(endpoint, request_timeout_s=30, **connection)

    unknown = "00000000-0000-0000-0000-00000000abcd"
    return Backend(
        name="openstack",
        driver=lambda: OpenStackDriver(settings()),
        unreachable=lambda: OpenStackDriver(settings(auth_url=f"http://{DEAD}/v3")),
        wrong_credentials=lambda: OpenStackDriver(settings(password=SecretStr("wrong-password"))),
        probe=lambda d: has(d.discovery).zones(),
        proves={
            Capability.INSTANCES: lambda d: (
                has(d.instances).list_instances([server["id"]]).found[server["id"]]
            ),
            Capability.DISCOVERY: lambda d: has(d.discovery).discovery_data(),
            Capability.ROUTES: lambda d: has(d.routes).list_routes("conformance"),
            Capability.LOAD_BALANCERS: lambda d: has(d.load_balancers).get_load_balancer(
                "a" + uuid.uuid4().hex[:20]
            ),
            Capability.VOLUMES: lambda d: has(d.volumes).find_volume(
                "pvc-conformance", "conformance"
            ),
            Capability.MACHINES: lambda d: has(d.machines).get_machine(absent_machine("absent-vm")),
        },
        unknown={
            Capability.INSTANCES: lambda d: has(d.instances).list_instances([unknown]).found,
            Capability.MACHINES: lambda d: has(d.machines).get_machine(absent_machine("absent-vm")),
            Capability.LOAD_BALANCERS: lambda d: has(d.load_balancers).get_load_balancer(
                "a" + "0" * 31
            ),
            Capability.VOLUMES: lambda d: has(d.volumes).get_volume(unknown),
        },
    )


#: provider → how to build its backend (one line per cloud).
BACKENDS: dict[str, Callable[[pytest.FixtureRequest], Backend]] = {
    "aws": aws_backend,
    "dvp": dvp_backend,
    "zvirt": zvirt_backend,
    "openstack": openstack_backend,
    "vsphere": vsphere_backend,
}


def is_absence(answer: object) -> bool:
    """``None`` or an empty collection: the cloud said "none" without an error."""
    return answer is None or (isinstance(answer, Sized) and len(answer) == 0)


__all__ = ["BACKENDS", "Backend", "errors", "is_absence"]
