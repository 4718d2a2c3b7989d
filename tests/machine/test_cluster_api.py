"""The real Cluster API core manager on the local stack, on its own: webhooks (defaulting,
validation, conversion) answer through the envtest-style URL rewrite, and the Machine controller
honours the infrastructure contract: it owns and labels the infra machine, copies
``spec.providerID`` and ``status.addresses`` once the infra machine is provisioned, moves the
phase to Provisioned, and deletes the infra machine with the Machine.

Infra objects here get their status by hand (no provider runs); the kinds are two test-only CRDs
(v1beta2 and v1beta1 contract) and the project's DVP and zVirt kinds from ``deploy/crds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NODES, Resource
from cloudloop.rules import machine as capi
from cloudloop.rules.node import UNINITIALIZED_TAINT
from devstack.crds import CRDS
from devstack.kube import CAPI, KWOK, KWOK_NODE_ANNOTATION, KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.node_joiner import NodeJoiner, publish_workload_kubeconfig
from tests.conftest import NAMESPACES
from tests.helpers import eventually
from tests.machine import capi_objects
from tests.machine.capi_objects import InfraKind

pytestmark = pytest.mark.stack

TEST_INFRA_GROUP = "infrastructure.cluster.x-k8s.io"


def infra_crd_for_tests(kind: str, contract: str) -> dict[str, Any]:
    """A minimal infra CRD carrying the contract label; status is a subresource, like a
    provider's."""
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{TEST_INFRA_GROUP}",
            "labels": {f"cluster.x-k8s.io/{contract}": "v1alpha1"},
        },
        "spec": {
            "group": TEST_INFRA_GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


#: kind prefix -> contract of the test-only infra kinds.
TEST_INFRA = {"ContractV1beta2": "v1beta2", "ContractV1beta1": "v1beta1"}
#: The project's infra kinds (machine, cluster), their providerIDs and a valid machine spec.
PROJECT_INFRA: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "dvp": (
        "DeckhouseMachine",
        "DeckhouseCluster",
        "dvp://{name}",
        {
            "vmClassName": "generic",
            "cpu": {"cores": 2, "cpuFraction": "50%"},
            "memory": "4Gi",
            "rootDiskSize": "20Gi",
            "rootDiskStorageClass": "linstor-thin-r1",
            "bootDiskImageRef": {"kind": "ClusterVirtualImage", "name": "ubuntu-24-04"},
        },
    ),
    "zvirt": (
        "ZvirtMachine",
        "ZvirtCluster",
        "zvirt://{uuid}",
        {
            "template": "ubuntu-22",
            "vnicProfileID": str(uuid.uuid4()),
            "nicName": "nic1",
            "cpu": {"cores": 1, "sockets": 1, "threads": 1},
            "rootDiskSizeGb": 20,
        },
    ),
    "aws": (
        "AWSMachine",
        "AWSCluster",
        "aws:///us-east-1a/{name}",
        {"instanceType": "t3.micro", "rootVolume": {"size": 20, "type": "gp3"}},
    ),
}


@dataclass(frozen=True)
class InfraCase:
    machine: InfraKind
    cluster: InfraKind
    #: ``str.format`` template of the providerID (``{name}``, ``{uuid}``).
    provider_id: str
    machine_spec: dict[str, Any]


@pytest.fixture(scope="module")
def capi_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = capi_objects.capi_stack(tmp_path_factory.mktemp("capi-stack"), KWOK)
    local.start()
    print(f"\nCluster API stack started in {local.started_in_s:.1f}s")
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def capi_kube(capi_stack: LocalStack) -> Kube:
    kube = Kube(api_client(capi_stack.kubeconfig))
    for prefix, contract in TEST_INFRA.items():
        for suffix in ("Cluster", "Machine"):
            kube.create(CRDS, infra_crd_for_tests(f"{prefix}{suffix}", contract))
    return kube


@pytest.fixture
def capi_namespace(capi_kube: Kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    capi_kube.create(NAMESPACES, {"metadata": {"name": name}})
    yield name
    capi_kube.delete(NAMESPACES, name)


def established(kube: Kube, crd: dict[str, Any]) -> bool:
    obj = kube.get(CRDS, crd["metadata"]["name"]) or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


async def infra_case(kube: Kube, param: str) -> InfraCase:
    """The infra kinds of a test parameter, their CRDs installed."""
    spec: dict[str, Any] = {}
    if param in TEST_INFRA:
        crds = [
            infra_crd_for_tests(f"{param}{suffix}", TEST_INFRA[param])
            for suffix in ("Machine", "Cluster")
        ]
        template = "contract-test:///{uuid}"
    else:
        machine_kind, cluster_kind, template, spec = PROJECT_INFRA[param]
        found = [capi_objects.project_crd(k) for k in (machine_kind, cluster_kind)]
        crds = [c for c in found if c is not None]
        if len(crds) != 2:
            pytest.skip(f"{machine_kind}/{cluster_kind} CRDs are not in deploy/crds yet")
        for crd in crds:
            if await asyncio.to_thread(kube.get, CRDS, crd["metadata"]["name"]) is None:
                await asyncio.to_thread(kube.create, CRDS, crd)
    for crd in crds:
        await eventually(functools.partial(established, kube, crd), what="CRD established")
    machine, cluster = (capi_objects.infra_kind_from_crd(c) for c in crds)
    return InfraCase(machine, cluster, template, spec)


async def test_manager_serves_defaulting_validation_and_conversion(
    capi_stack: LocalStack, capi_kube: Kube, capi_namespace: str
) -> None:
    manager = capi_stack.clusters["capi"].process(CAPI)
    assert manager.running
    kube, ns = capi_kube, capi_namespace
    case = await infra_case(kube, "ContractV1beta2")
    infra, infra_cluster = case.machine, case.cluster
    await asyncio.to_thread(capi_objects.cluster, kube, ns, "conv", infra_cluster, {})

    # Conversion webhook: the v1beta2 object is served as v1beta1 too.
    old = Resource("cluster.x-k8s.io", "v1beta1", "clusters", "Cluster")
    as_v1beta1 = await asyncio.to_thread(kube.get, old, "conv", ns)
    assert as_v1beta1 is not None
    assert as_v1beta1["apiVersion"] == "cluster.x-k8s.io/v1beta1"
    assert as_v1beta1["spec"]["infrastructureRef"]["kind"] == infra_cluster.kind

    # Defaulting webhook: cluster-name label and a "v" on the version.
    created = await asyncio.to_thread(
        kube.create,
        capi.MACHINES.untyped,  # spec.version: the product reads no Machine version
        {
            "metadata": {"name": "defaulted", "namespace": ns},
            "spec": {
                "clusterName": "conv",
                "version": "1.34.4",
                "bootstrap": {"dataSecretName": "none"},
                "infrastructureRef": infra.ref("defaulted"),
            },
        },
        ns,
    )
    assert created["metadata"]["labels"][capi.CLUSTER_NAME_LABEL] == "conv"
    assert created["spec"]["version"] == "v1.34.4"

    # Validating webhook: clusterName is immutable (checked by the webhook, not the schema).
    with pytest.raises(KubeError) as err:
        await asyncio.to_thread(
            kube.patch, capi.MACHINES, "defaulted", {"spec": {"clusterName": "other"}}, ns
        )
    assert err.value.status == 422
    assert "immutable" in str(err.value)


@pytest.mark.parametrize(
    "infra_param",
    [
        pytest.param("ContractV1beta2", id="v1beta2-contract"),
        pytest.param("ContractV1beta1", id="v1beta1-contract"),
        pytest.param("dvp", id="dvp-crds"),
        pytest.param("zvirt", id="zvirt-crds"),
        pytest.param("aws", id="aws-crds"),
    ],
)
async def test_manager_honours_infra_machine_contract(
    capi_stack: LocalStack, capi_kube: Kube, capi_namespace: str, infra_param: str
) -> None:
    kube, ns = capi_kube, capi_namespace
    with capi_objects.explained(kube, ns, capi_stack):
        case = await infra_case(kube, infra_param)
        infra, infra_cluster = case.machine, case.cluster
        name = f"m-{uuid.uuid4().hex[:6]}"
        provider_id = case.provider_id.format(name=name, uuid=uuid.uuid4())
        addresses = [
            {"type": "InternalIP", "address": "10.1.2.3"},
            {"type": "Hostname", "address": name},
        ]

        await asyncio.to_thread(capi_objects.bootstrap_secret, kube, ns, f"{name}-boot", "#cloud")
        await asyncio.to_thread(capi_objects.cluster, kube, ns, "c1", infra_cluster, {})
        await asyncio.to_thread(
            lambda: capi_objects.machine(
                kube,
                ns,
                name,
                cluster_name="c1",
                infra=infra,
                infra_spec=case.machine_spec,
                data_secret=f"{name}-boot",
            )
        )

        # The Cluster controller owns the infra cluster; the Machine controller owns and labels
        # the infra machine, and waits (phase stays before Provisioned) while it is not provisioned.
        def owned_by(resource: Resource, obj_name: str, owner_kind: str) -> dict[str, Any] | None:
            obj = kube.get(resource, obj_name, ns) or {}
            owners = obj.get("metadata", {}).get("ownerReferences") or []
            return obj if any(o["kind"] == owner_kind for o in owners) else None

        await eventually(
            lambda: owned_by(infra_cluster.resource, "c1", "Cluster"), what="infra cluster owned"
        )
        infra_obj = await eventually(
            lambda: owned_by(infra.resource, name, "Machine"),
            timeout=capi_objects.MANAGER_REQUEUE_WAIT_S,
            what="infra machine owned",
        )
        assert infra_obj["metadata"]["labels"][capi.CLUSTER_NAME_LABEL] == "c1"
        phase = await eventually(
            lambda: capi_objects.machine_status(kube, ns, name).get("phase"), what="Machine phase"
        )
        assert phase not in capi_objects.PROVISIONED_PHASES

        # The infra cluster reports provisioned: the Cluster follows.
        await asyncio.to_thread(
            kube.patch,
            infra_cluster.resource,
            "c1",
            {"status": infra_cluster.provisioned_status()},
            ns,
            subresource="status",
        )

        def cluster_infra_provisioned() -> bool:
            obj = kube.get(capi.CLUSTERS, "c1", ns) or {}
            init = (obj.get("status") or {}).get("initialization") or {}
            return bool(init.get("infrastructureProvisioned"))

        await eventually(cluster_infra_provisioned, what="Cluster infrastructureProvisioned")

        # The provider sets providerID, then provisioned + addresses: CAPI copies them.
        await asyncio.to_thread(
            kube.patch, infra.resource, name, {"spec": {"providerID": provider_id}}, ns
        )
        await asyncio.to_thread(
            kube.patch,
            infra.resource,
            name,
            {"status": {**infra.provisioned_status(), "addresses": addresses}},
            ns,
            subresource="status",
        )
        machine = await eventually(
            lambda: capi_objects.provisioned_machine(kube, ns, name),
            timeout=60,
            what="Machine Provisioned",
        )
        assert machine["spec"]["providerID"] == provider_id
        assert machine["status"]["addresses"] == addresses
        assert machine["status"]["initialization"]["infrastructureProvisioned"] is True

        # Deleting the Machine deletes the infra machine (no finalizer here: no provider runs).
        await asyncio.to_thread(kube.delete, capi.MACHINES, name, ns)
        await eventually(
            lambda: kube.get(infra.resource, name, ns) is None, what="infra machine deleted"
        )
        await eventually(lambda: kube.get(capi.MACHINES, name, ns) is None, what="Machine gone")


async def test_machine_runs_once_a_node_has_its_provider_id(
    capi_stack: LocalStack, capi_kube: Kube, capi_namespace: str
) -> None:
    """With the workload cluster reachable (here: the same apiserver, through the
    ``<cluster>-kubeconfig`` Secret), CAPI matches ``Node.spec.providerID`` to the Machine's:
    phase Running, ``nodeRef`` set and the Machine's annotations on the Node."""
    kube, ns = capi_kube, capi_namespace
    with capi_objects.explained(kube, ns, capi_stack):
        case = await infra_case(kube, "ContractV1beta2")
        infra, infra_cluster = case.machine, case.cluster
        name = f"m-{uuid.uuid4().hex[:6]}"
        node = f"node-{name}-{ns}"
        provider_id = case.provider_id.format(uuid=uuid.uuid4())
        await asyncio.to_thread(
            capi_objects.workload_kubeconfig_secret, kube, ns, "c1", capi_stack.kubeconfig
        )
        await asyncio.to_thread(capi_objects.bootstrap_secret, kube, ns, f"{name}-boot", "#cloud")
        await asyncio.to_thread(capi_objects.cluster, kube, ns, "c1", infra_cluster, {})
        await asyncio.to_thread(
            lambda: capi_objects.machine(
                kube,
                ns,
                name,
                cluster_name="c1",
                infra=infra,
                infra_spec={**case.machine_spec, "providerID": provider_id},
                data_secret=f"{name}-boot",
            )
        )
        await asyncio.to_thread(
            kube.create, NODES, {"metadata": {"name": node}, "spec": {"providerID": provider_id}}
        )
        await asyncio.to_thread(
            kube.patch,
            infra_cluster.resource,
            "c1",
            {"status": infra_cluster.provisioned_status()},
            ns,
            subresource="status",
        )
        await asyncio.to_thread(
            kube.patch,
            infra.resource,
            name,
            {"status": infra.provisioned_status()},
            ns,
            subresource="status",
        )

        def running() -> dict[str, Any] | None:
            obj = kube.get(capi.MACHINES.untyped, name, ns) or {}
            return obj if (obj.get("status") or {}).get("phase") == "Running" else None

        machine = await eventually(running, timeout=60, what="Machine Running")
        assert machine["status"]["nodeRef"]["name"] == node
        node_obj = await asyncio.to_thread(kube.get, NODES, node)
        assert node_obj is not None
        assert node_obj["metadata"]["annotations"]["cluster.x-k8s.io/machine"] == name

        # Deleting the Machine deletes the infra machine. The Node stays: CAPI deletes Nodes only
        # in clusters with control-plane members ("no control plane members" here).
        await asyncio.to_thread(kube.delete, capi.MACHINES, name, ns)
        await eventually(lambda: kube.get(capi.MACHINES, name, ns) is None, what="Machine gone")
        assert await asyncio.to_thread(kube.get, infra.resource, name, ns) is None
        await asyncio.to_thread(kube.delete, NODES, node)


async def test_a_machine_vm_joins_as_a_node_and_its_kubelet_stops_with_it(
    capi_stack: LocalStack, capi_kube: Kube, capi_namespace: str
) -> None:
    """The dev stack's kubelet (:class:`NodeJoiner`): a provisioned Machine's VM registers a
    kwok Node with its providerID and the ``uninitialized`` taint, kwok keeps it Ready, CAPI
    matches it (phase Running); the Machine gone, the Node leaves kwok and turns Unknown."""
    kube, ns = capi_kube, capi_namespace
    joiner = NodeJoiner(kube, namespace=ns, name=f"j-{ns}")
    joining = asyncio.create_task(joiner.run())
    with contextlib.ExitStack() as cleanup, capi_objects.explained(kube, ns, capi_stack):
        cleanup.callback(joiner.stop)
        case = await infra_case(kube, "ContractV1beta2")
        infra, infra_cluster = case.machine, case.cluster
        name = f"m-{uuid.uuid4().hex[:6]}"
        provider_id = case.provider_id.format(uuid=uuid.uuid4())
        await asyncio.to_thread(publish_workload_kubeconfig, kube, ns, "c1", capi_stack.kubeconfig)
        await asyncio.to_thread(capi_objects.bootstrap_secret, kube, ns, f"{name}-boot", "#cloud")
        await asyncio.to_thread(capi_objects.cluster, kube, ns, "c1", infra_cluster, {})
        await asyncio.to_thread(
            lambda: capi_objects.machine(
                kube,
                ns,
                name,
                cluster_name="c1",
                infra=infra,
                infra_spec={**case.machine_spec, "providerID": provider_id},
                data_secret=f"{name}-boot",
            )
        )
        assert await asyncio.to_thread(kube.get, NODES, name) is None  # no VM yet, no kubelet
        for resource, obj, status in (
            (infra_cluster.resource, "c1", infra_cluster.provisioned_status()),
            (infra.resource, name, infra.provisioned_status()),
        ):
            await asyncio.to_thread(
                kube.patch, resource, obj, {"status": status}, ns, subresource="status"
            )

        def ready(status: str) -> dict[str, Any] | None:
            node: dict[str, Any] = dict(kube.get(NODES, name) or {})
            conditions = (node.get("status") or {}).get("conditions") or []
            found = [c["status"] for c in conditions if c["type"] == "Ready"]
            return node if found == [status] else None

        node = await eventually(lambda: ready("True"), timeout=60, what="the Node Ready")
        assert node["spec"]["providerID"] == provider_id
        # Not ready until kwok's first heartbeat: the API server's taint, no controller-manager.
        assert UNINITIALIZED_TAINT in [t["key"] for t in node["spec"]["taints"]]

        def running() -> dict[str, Any] | None:
            obj = kube.get(capi.MACHINES.untyped, name, ns) or {}
            return obj if (obj.get("status") or {}).get("phase") == "Running" else None

        machine = await eventually(running, timeout=60, what="Machine Running")
        assert machine["status"]["nodeRef"]["name"] == name

        await asyncio.to_thread(kube.delete, capi.MACHINES, name, ns)
        await eventually(lambda: kube.get(capi.MACHINES, name, ns) is None, what="Machine gone")
        stopped = await eventually(lambda: ready("Unknown"), timeout=30, what="the kubelet gone")
        assert KWOK_NODE_ANNOTATION not in stopped["metadata"]["annotations"]
    await joining
    await asyncio.to_thread(kube.delete, NODES, name)


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    """A control plane with the manager starts (timed) and stops without leftovers."""
    started = time.monotonic()
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path,
            temporal=False,
            moto=False,
            kube=(KubeOptions(name="capi-only", components=(CAPI,)),),
        )
    )
    with local:
        plane = local.clusters["capi-only"]
        manager = plane.process(CAPI)
        pids = [p.popen.pid for p in plane.processes if p.popen is not None]
        assert manager.running
        print(f"\ncontrol plane + Cluster API manager ready in {time.monotonic() - started:.1f}s")
    for pid in pids:
        assert not pid_alive(pid), f"process {pid} outlived the stack"


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists (ManagedProcess.stop reaps its child, so no zombie is left)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
