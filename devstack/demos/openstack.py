"""The OpenStack demo of ``cloudloop dev --provider openstack``: the OpenStack API emulator with
two Nova servers whose kwok Nodes node sync initializes, pod routes on the router, an LB
Service whose Octavia LB gets a floating IP, a CloudProbe, and a node group: the Cluster API
manager runs in the dev cluster, an ``OpenStackInstanceClass`` ``demo-workers`` is rendered (as
``cloudloop nodegroup render`` does) into an ``OpenStackMachineTemplate`` and a MachineDeployment
in namespace ``demo-capi``, scaled 0 → 2: each machine's workflow makes its root volume, port and
server in the emulator. And a cluster's own infrastructure: the ``Standard`` layout of
``deploy/layouts/examples/openstack-standard.yaml`` (without its node group: base and one master)
applied for prefix ``dev-os`` by the ``Layout`` workflow (``layout/dev-os``, a ``LayoutModule``
child per module, one activity per resource, all in the Temporal UI): security group, key pair,
network, subnet, router, the master's port, root and data volumes, server and floating IP. And
storage through CSI (:mod:`.storage`): the chart-shaped controller and sidecars make a
StorageClass per Cinder volume type from discovery, and the claim ``demo-data`` of the default
one is bound to a volume in its pod's zone and attached to that server (the CSINode names the
server's ID and its zone under Cinder CSI's topology key, as node-driver-registrar would).

The product is configured the way Deckhouse does it: a ``cloud.conf`` (written into the state
folder, its password included) named by ``cloudloop.openstack.cloud_config_file``. The emulator's
Octavia and Nova take a few seconds per step, so ``PENDING_CREATE`` and ``BUILD`` show.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import openstack
import yaml
from temporalio.common import WorkflowIDConflictPolicy

from cloudloop import searchattrs, temporal
from cloudloop.cloud.openstack.capi import INFRA_KINDS as OPENSTACK_KINDS
from cloudloop.cloud.openstack.capi import NODE_TEMPLATES as OPENSTACK_TEMPLATES
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import CLOUD_PROBES, NODES, SERVICES, Resource
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput, workflow_id
from cloudloop.rules.node import UNINITIALIZED_TAINT
from cloudloop.settings import LayoutSettings
from devstack.demos.common import DEPLOYMENTS, seed_node_group
from devstack.demos.storage import CLAIM, DemoStorage, default_storage_class, registered_node
from devstack.kube import CAPI, KWOK_NODE_ANNOTATION
from devstack.local import LocalStack, StackOptions
from devstack.openstack_emulator import (
    PRIVATE_NETWORK,
    PUBLIC_NETWORK,
    Delays,
    OpenStackEmulatorEndpoint,
    OpenStackEmulatorOptions,
)

DEMO_SERVERS = (("demo-node-0", "nova"), ("demo-node-1", "nova-b"))
#: Slow enough to watch the states in the Temporal UI and through the SDK.
DEMO_DELAYS = Delays(server_build_s=2, lb_create_s=4, lb_update_s=1.5, lb_delete_s=2)
#: The node group: its namespace, name and size.
GROUP_NAMESPACE = "demo-capi"
GROUP = "demo-workers"
GROUP_SIZE = 2
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
#: The layout: its example, the cluster's prefix and UUID.
LAYOUT_EXAMPLE = (
    Path(__file__).resolve().parents[2]
    / "deploy"
    / "layouts"
    / "examples"
    / "openstack-standard.yaml"
)
LAYOUT_PREFIX = "dev-os"
LAYOUT_UUID = "7d3f8a52-6c0e-4f0b-9a51-2f7c1f3e9d10"


def cloud_conf(endpoint: OpenStackEmulatorEndpoint) -> str:
    """``cloud.conf`` as Deckhouse renders it for cloud-controller-manager."""
    return "\n".join(
        [
            "[Global]",
            f'auth-url = "{endpoint.auth_url}"',
            f'domain-name = "{endpoint.user_domain}"',
            f'tenant-name = "{endpoint.project}"',
            f'username = "{endpoint.username}"',
            f'password = "{endpoint.password}"',
            f'region = "{endpoint.region}"',
            "[Networking]",
            f'public-network-name = "{PUBLIC_NETWORK}"',
            f'internal-network-name = "{PRIVATE_NETWORK}"',
            "ipv6-support-disabled = true",
            "[LoadBalancer]",
            'create-monitor = "true"',
            'monitor-delay = "2s"',
            'monitor-timeout = "1s"',
            f'subnet-id = "{endpoint.seed.private_subnet_id}"',
            f'floating-network-id = "{endpoint.seed.public_network_id}"',
            "[Route]",
            f"router-id = {endpoint.seed.router_id}",
            "[BlockStorage]",
            "rescan-on-resize = true",
            "",
        ]
    )


class OpenStackDemo:
    name = "openstack"

    def __init__(self) -> None:
        self.storage: DemoStorage | None = None

    def stack_options(self, options: StackOptions) -> StackOptions:
        main, *others = options.kube
        with_capi = dataclasses.replace(main, components=(*main.components, CAPI))
        return dataclasses.replace(
            options,
            kube=(with_capi, *others),
            openstack_emulator=OpenStackEmulatorOptions(
                password="dev-openstack", delays=DEMO_DELAYS
            ),
        )

    def seed(self, stack: LocalStack, kube: Kube, settings: Settings) -> Settings:
        endpoint = stack.openstack
        assert endpoint is not None
        conf = stack.state_dir / "openstack" / "cloud.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.touch(mode=0o600)
        conf.write_text(cloud_conf(endpoint))
        servers = _seed_servers(endpoint)
        _seed_cluster(kube)
        layout = _layout_config(stack.state_dir / "openstack" / "layout.yaml", endpoint)
        asyncio.run(_start_layout(settings, layout))
        section = OpenStackSettings(cloud_config_file=conf, zones=[z for _, z in DEMO_SERVERS])
        settings = settings.model_copy(
            update={
                "provider": self.name,
                "openstack": section,
                # the worker reads the layout's config where the demo wrote it
                "layouts": LayoutSettings(source_dir=layout.parent),
            }
        )
        driver = OpenStackDriver(section)
        try:
            storage_class = default_storage_class(driver)
            topology_key = driver.volumes.volume_topology_key
        finally:
            driver.close()
        for name, zone in DEMO_SERVERS:  # the node plugin's node ID: the server's ID
            registered_node(
                kube,
                name,
                driver=settings.csi.driver_name,
                node_id=servers[name],
                topology={topology_key: zone},
            )
        self.storage = DemoStorage(settings, stack.kubeconfig, stack.state_dir / "logs")
        self.storage.start(kube, storage_class, {"cloudloop.io/demo": "true"})
        _seed_node_group(kube)
        return settings

    def endpoints(self, stack: LocalStack) -> list[str]:
        assert stack.openstack is not None
        return [
            f"  OpenStack   : {stack.openstack.auth_url} (Keystone; user "
            f"{stack.openstack.username}, project {stack.openstack.project})",
            f"  emulator    : {stack.openstack.admin_url}/state (admin API: state, faults)",
            f"  cloud.conf  : {stack.state_dir / 'openstack' / 'cloud.conf'}",
            f"  layout      : {stack.state_dir / 'openstack' / 'layout.yaml'} (Standard, "
            f"prefix {LAYOUT_PREFIX}; workflow {workflow_id(LAYOUT_PREFIX)})",
        ]

    def layout_config(self, folder: Path, prefix: str) -> Path | None:
        return None  # the demo's converge pass is AWS's

    def stop(self) -> None:
        """The CSI controller and its sidecars (the stack stops after them)."""
        if self.storage is not None:
            self.storage.stop()

    def watch(self, stack: LocalStack, kubectl: Path) -> list[str]:
        assert stack.openstack is not None
        return [
            f"  {kubectl} get services demo-web   # EXTERNAL-IP: the Octavia LB's floating IP",
            f"  {kubectl} get nodes -o custom-columns=NAME:.metadata.name,"
            "PROVIDER:.spec.providerID,PODCIDR:.spec.podCIDR",
            f"  curl -s {stack.openstack.admin_url}/state | python3 -m json.tool | less"
            "   # servers, loadbalancers, routers[].routes",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='Service'\"",
            f"  {kubectl} get pvc,volumeattachments   # {CLAIM}: Bound to a Cinder volume in "
            "its pod's zone, attached to that server",
            f"  {kubectl} -n {GROUP_NAMESPACE} get machinedeployments,machines,"
            "openstackmachines   # the node group: 2 machines, one server each",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='Layout'\"   # the Standard layout: base and master-0",
            f"  cloudloop layout plan --config {stack.state_dir / 'openstack' / 'layout.yaml'} "
            f"--cluster-uuid {LAYOUT_UUID} --temporal-address {stack.temporal_address}"
            "   # after the apply: nothing to do",
        ]


def _seed_servers(endpoint: OpenStackEmulatorEndpoint) -> dict[str, str]:
    """Two servers through openstacksdk, as a user (or Deckhouse's node manager) makes them;
    their IDs by name."""
    connect: Any = openstack.connect
    sdk: Any = connect(**endpoint.connect_kwargs())
    try:
        network = sdk.network.find_network(PRIVATE_NETWORK)
        image = sdk.image.find_image("ubuntu-22.04")
        made: dict[str, str] = {}
        for name, zone in DEMO_SERVERS:
            server = sdk.compute.create_server(
                name=name,
                flavor_id="3",  # m1.medium
                image_id=image.id,
                networks=[{"uuid": network.id}],
                availability_zone=zone,
                metadata={"cluster": "dev"},
            )
            sdk.compute.wait_for_server(server, wait=60, interval=0.5)
            made[name] = str(server.id)
        return made
    finally:
        sdk.close()


def _seed_cluster(kube: Kube) -> None:
    """kwok Nodes named like the servers (no providerID: node sync finds them by name), a
    Deployment, its LB Service and a CloudProbe."""
    for name, _ in DEMO_SERVERS:
        kube.create(
            NODES,
            {
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                    "labels": {"cloudloop.io/demo": "true", "kubernetes.io/hostname": name},
                },
                "spec": {
                    "taints": [
                        {"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
                    ]
                },
            },
        )
    kube.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "demo-web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "demo-web"}},
                "template": {
                    "metadata": {"labels": {"app": "demo-web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        },
        "default",
    )
    kube.create(
        SERVICES,
        {
            "metadata": {
                "name": "demo-web",
                "namespace": "default",
                "annotations": {"loadbalancer.openstack.org/enable-health-monitor": "true"},
            },
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": "demo-web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
        "default",
    )
    try:
        kube.create(
            CLOUD_PROBES,
            {
                "metadata": {"name": "openstack", "namespace": "default"},
                "spec": {"provider": "openstack"},
            },
            "default",
        )
    except KubeError as exc:
        if not exc.conflict:
            raise


def _seed_node_group(kube: Kube) -> None:
    """The demo node group: an ``OpenStackInstanceClass``, the Cluster and a NodeGroup of
    :data:`GROUP_SIZE` in zone ``nova`` (image and networks as the registration gives them)."""
    seed_node_group(
        kube,
        instance_class={
            "apiVersion": "deckhouse.io/v1",
            "kind": OPENSTACK_TEMPLATES.instance_class.kind,
            "metadata": {"name": GROUP},
            "spec": {
                "flavorName": "m1.small",
                "imageName": "ubuntu-22.04",
                "mainNetwork": PRIVATE_NETWORK,
                "additionalSecurityGroups": ["default"],
                "rootDiskSize": 10,
            },
        },
        kinds=OPENSTACK_KINDS,
        templates=OPENSTACK_TEMPLATES,
        namespace=GROUP_NAMESPACE,
        size=GROUP_SIZE,
        zones=("nova",),
    )


def _layout_config(path: Path, endpoint: OpenStackEmulatorEndpoint) -> Path:
    """The Standard example for prefix :data:`LAYOUT_PREFIX` on the emulator, without its node
    group (the base and one master), written where the worker reads it (mode 0600: it holds
    the password)."""
    docs = list(yaml.safe_load_all(LAYOUT_EXAMPLE.read_text()))
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = LAYOUT_PREFIX
            continue
        doc["provider"] = {
            "authURL": endpoint.auth_url,
            "domainName": endpoint.user_domain,
            "tenantName": endpoint.project,
            "username": endpoint.username,
            "password": endpoint.password,
            "region": endpoint.region,
        }
        doc.pop("nodeGroups", None)
        doc["masterNodeGroup"]["replicas"] = 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump_all(docs))
    return path


async def _start_layout(settings: Settings, config: Path) -> None:
    """Start the layout's apply (``layout/<prefix>``) on the worker's queue: the worker, started
    right after the seed, runs it; a second ``cloudloop dev`` on the same state joins it."""
    from workflows.layout import LayoutWorkflow

    client = await temporal.connect(settings.temporal)
    await client.start_workflow(
        LayoutWorkflow.run,
        LayoutInput(
            action="apply",
            provider="openstack",
            source=ConfigSource(file=str(config)),
            cluster=ClusterIdentity(prefix=LAYOUT_PREFIX, uuid=LAYOUT_UUID),
        ),
        id=workflow_id(LAYOUT_PREFIX),
        task_queue=settings.temporal.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=searchattrs.for_object(
            cluster=LAYOUT_PREFIX,
            provider="openstack",
            kind="Layout",
            namespace="",
            name=LAYOUT_PREFIX,
        ),
    )
