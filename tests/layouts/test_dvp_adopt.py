"""Adoption of a DVP ``Standard`` cluster, and an upgrade over this module's earlier names.

Upstream's cluster is made in the parent the way its Terraform modules make it (read from
``<dvp>/terraform-modules/{root-disk,kubernetes-data-disk,master,static-node}``): disks named
with upstream's hashes and annotations, a cloud-init Secret without labels, VMs named
``<hostname>-<h6>`` where the hash covers the address their Auto ``VirtualMachineIPAddress`` got
(so not the name this module would compute), labelled and annotated as upstream does, the disks
and Secret owned by their VM; the worker's run policy differs from the layout's (drift). The
states are written as dhctl keeps them (``kubernetes_manifest`` records of every kind, the
Secret's ``kubernetes_secret`` with the bootstrap data in it, owner references, readiness
checks). ``adopt`` places and finds every object (the Secrets given the node's labels, nothing
else changed) and shows the worker's drift; ``apply`` repairs that one field; a second
``apply`` makes no mutating request and leaves every resourceVersion as it was; ``destroy``
leaves nothing, though the master's Secret was deleted out of band first. The history never
holds the bootstrap data.

The upgrade: a layout as this module made it before it found objects by labels (other hashes in
every name, its own destructive-parameters annotation, no disk annotations, the NetworkPolicy
with the managed-by label): ``apply`` finds all of it — no request that changes anything, no
second VM; then a destructive change (the master's cores), seen in the annotation, replaces
the master's VM (the new one on the disks found, under the new name, nothing else touched);
``destroy`` leaves nothing.
One stack for the module (the DVP layout tests' own), the worker in this process.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from cloudloop.cloud.dvp import layout as dvp
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.layout_state import STATE_TYPES
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.layouts.config import ClusterIdentity, DVPClusterConfiguration, validate_document
from cloudloop.layouts.model import LayoutDef, ResourceDef
from cloudloop.messages.layout import LayoutResult
from devstack.backends.dvp_layouts import (
    NETWORK_POLICIES,
    cluster_resources,
    dvp_requests,
    mutating_since,
)
from devstack.dvp_simulator import DvpParent
from devstack.local import LocalStack
from starters.layout import run_layout, state_records
from tests.helpers import eventually_async
from tests.layouts.dvp_support import (
    dvp_client,
    dvp_config,
    dvp_layout_settings,
    dvp_stack,
    dvp_worker,
    layout_input,
)
from tests.layouts.support import payloads
from tests.support.histories import plain_json

__all__ = ["dvp_client", "dvp_layout_settings", "dvp_stack", "dvp_worker"]

pytestmark = pytest.mark.stack
USER_DATA = "dvp-bootstrap-token-s3cr3t"
API_VERSION = "virtualization.deckhouse.io/v1alpha2"
KINDS = (r.VIRTUAL_MACHINES, r.VIRTUAL_DISKS, r.SECRETS, NETWORK_POLICIES)


def define(path: Path, prefix: str, cluster_uuid: str) -> LayoutDef:
    config = validate_document(list(yaml.safe_load_all(path.read_text()))[1])
    assert isinstance(config, DVPClusterConfiguration)
    return dvp.define(config, ClusterIdentity(prefix=prefix, uuid=cluster_uuid), [])


def make(
    kube: Kube,
    namespace: str,
    layout: LayoutDef,
    name_of: Callable[[ResourceDef], str],
    vm_annotations: Callable[[ResourceDef], dict[str, str]],
    *,
    upstream: bool,
    run_policy: dict[str, str] | None = None,
) -> dict[str, str]:
    """Every object of ``layout`` made directly in the parent under ``name_of`` its definition;
    resource key → name."""
    names: dict[str, str] = {}
    for module in layout.modules:
        for d in module.resources:
            if d.read_only:
                continue
            name = names[d.key] = name_of(d)
            meta: dict[str, Any] = {"name": name, "labels": dict(d.tags)}
            if d.kind == dvp.NETWORK_POLICY:
                if not upstream:  # this module's earlier label set
                    meta["labels"][r.MANAGED_BY_LABEL] = r.MANAGED_BY_VALUE
                kube.create(NETWORK_POLICIES, {"metadata": meta, **d.properties}, namespace)
            elif d.kind == dvp.DISK:
                if upstream:
                    meta["annotations"] = d.properties["created_annotations"]
                kube.create(
                    r.VIRTUAL_DISKS, {"metadata": meta, "spec": d.properties["spec"]}, namespace
                )
            elif d.kind == dvp.SECRET:
                if upstream:  # upstream's kubernetes_secret has no labels
                    del meta["labels"]
                data = f"#cloud-config\n# {USER_DATA}\n"
                secret = {
                    "metadata": meta,
                    "type": d.properties["type"],
                    "data": {r.CLOUD_INIT_KEY: base64.b64encode(data.encode()).decode()},
                }
                kube.create(r.SECRETS, secret, namespace)
            else:
                # the spec names the disks and Secret as they were made
                made = {o.name: names[o.key] for o in module.resources if o.key in names}
                spec = json.loads(json.dumps(d.properties["spec"]))
                for device in spec["blockDeviceRefs"]:
                    device["name"] = made[device["name"]]
                user_data = spec["provisioning"]["userDataRef"]
                user_data["name"] = made[user_data["name"]]
                if run_policy and d.key in run_policy:
                    spec["runPolicy"] = run_policy[d.key]
                meta["annotations"] = vm_annotations(d)
                vm = kube.create(r.VIRTUAL_MACHINES, {"metadata": meta, "spec": spec}, namespace)
                if upstream:  # kubernetes_owner_references_v1: disks and Secret owned by the VM
                    owner = {
                        "apiVersion": API_VERSION,
                        "kind": "VirtualMachine",
                        "name": name,
                        "uid": vm["metadata"]["uid"],
                    }
                    for other in module.resources:
                        if other.kind in (dvp.DISK, dvp.SECRET):
                            kind = r.VIRTUAL_DISKS if other.kind == dvp.DISK else r.SECRETS
                            patch = {"metadata": {"ownerReferences": [owner]}}
                            kube.patch(kind, names[other.key], patch, namespace)
    return names


def upstream_vm(d: ResourceDef, address: str) -> tuple[str, dict[str, str]]:
    """Upstream's name and annotations of a VM whose Auto address is ``address``."""
    params = d.properties["destructive"]
    params = {**params, "virtualMachine": {**params["virtualMachine"], "ipAddress": address}}
    digest = dvp.vm_hash(params)
    hostname = d.tags[r.HOSTNAME_LABEL]
    annotations = {
        dvp.DESTRUCTIVE_ANNOTATION: dvp.tf_json(params),
        dvp.DESTRUCTIVE_HASH_ANNOTATION: digest,
    }
    return f"{hostname}-{digest}", annotations


def manifest(tf_name: str, obj: dict[str, Any], module: str = "") -> dict[str, Any]:
    resource: dict[str, Any] = {
        "mode": "managed",
        "type": "kubernetes_manifest",
        "name": tf_name,
        "provider": 'provider["registry.opentofu.org/hashicorp/kubernetes"]',
        "instances": [{"schema_version": 1, "attributes": {"manifest": obj, "object": obj}}],
    }
    if module:
        resource["module"] = module
    return resource


def other(tf_type: str, tf_name: str, attributes: dict[str, Any], module: str = "") -> Any:
    resource = manifest(tf_name, {}, module)
    resource["type"] = tf_type
    resource["instances"][0]["attributes"] = attributes
    return resource


def state(*resources: dict[str, Any]) -> str:
    return json.dumps(
        {
            "version": 4,
            "terraform_version": "1.9.1",
            "serial": 5,
            "lineage": str(uuid.uuid4()),
            "outputs": {},
            "resources": list(resources),
        }
    )


def node_state(kube: Kube, namespace: str, names: list[tuple[str, str]]) -> str:
    """A node's state as upstream's master-node/static-node modules leave it; ``names`` are
    (kind, name) of the node's objects, the VM's last."""
    records: list[dict[str, Any]] = []
    for kind, name in names:
        if kind == "Secret":
            records.append(
                other(
                    "kubernetes_secret",
                    "cloudinit-secret",
                    {
                        "id": f"{namespace}/{name}",
                        "metadata": [{"name": name, "namespace": namespace}],
                        "data": {"userData": f"#cloud-config\n# {USER_DATA}\n"},
                        "type": r.CLOUD_INIT_SECRET_TYPE,
                    },
                    "module.master",
                )
            )
            continue
        resource = {"VirtualDisk": r.VIRTUAL_DISKS, "VirtualMachine": r.VIRTUAL_MACHINES}[kind]
        obj = kube.get(resource, name, namespace)
        assert obj is not None
        obj = {k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec")}
        module = "module.master" if kind == "VirtualMachine" else f"module.{name}"
        records.append(manifest(kind.lower(), obj, module))
        records.append(
            other(
                "kubernetes_resource_ready_v1",
                kind.lower(),
                {"id": name, "name": name, "kind": kind},
                module,
            )
        )
        if kind == "VirtualDisk":
            records.append(
                other("kubernetes_owner_references_v1", name, {"id": name, "kind": kind})
            )
    ip = {
        "apiVersion": API_VERSION,
        "kind": "VirtualMachineIPAddress",
        "metadata": {"name": f"{names[-1][1]}-auto", "namespace": namespace},
        "spec": {"type": "Auto", "staticIP": ""},
    }
    records.append(manifest("ipv4_address", ip, "module.ipv4-address"))
    return state(*records)


def versions(kube: Kube, namespace: str) -> dict[str, str]:
    return {
        f"{kind.kind}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for kind in KINDS
        for o in kube.list(kind, namespace).get("items") or []
    }


async def test_adopt_upstreams_objects_then_apply_makes_nothing_and_destroy_leaves_nothing(
    dvp_stack: tuple[LocalStack, DvpParent],
    dvp_client: Client,
    dvp_layout_settings: Settings,
    dvp_worker: None,
    tmp_path: Path,
) -> None:
    _, parent = dvp_stack
    kube = parent.kube
    namespace = parent.new_namespace("adopt")
    prefix, cluster_uuid = f"d{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = dvp_config(tmp_path, parent, namespace, prefix)
    layout = define(path, prefix, cluster_uuid)
    vms = {d.key: d for m in layout.modules for d in m.resources if d.kind == dvp.VM}
    upstream_vms = {k: upstream_vm(d, f"10.66.0.{i + 10}") for i, (k, d) in enumerate(vms.items())}
    worker_vm = next(k for k in vms if "-worker-" in k)

    def name_of(d: ResourceDef) -> str:
        if d.kind == dvp.VM:
            return upstream_vms[d.key][0]
        if d.kind == dvp.SECRET:  # named with its VM's hash
            host = d.tags[r.HOSTNAME_LABEL]
            vm = next(v for v in vms.values() if v.tags[r.HOSTNAME_LABEL] == host)
            return f"{d.tags[r.HOSTNAME_LABEL]}-cloudinit-{upstream_vms[vm.key][0][-6:]}"
        return d.name  # the disks' and NetworkPolicy's names are upstream's

    names = make(
        kube,
        namespace,
        layout,
        name_of,
        lambda d: upstream_vms[d.key][1],
        upstream=True,
        run_policy={worker_vm: "Manual"},
    )
    assert all(names[k] != d.name for k, d in vms.items())  # not the names this module computes

    async def running() -> bool:
        items = kube.list(r.VIRTUAL_MACHINES, namespace).get("items") or []
        return len(items) == 2 and all(
            (o.get("status") or {}).get("phase") == "Running" for o in items
        )

    await eventually_async(running, timeout=60)
    sources: list[str] = []
    base = state(
        manifest(
            "isolated_cluster_prefix_network_policy",
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": f"isolated-{prefix}", "namespace": namespace},
            },
        ),
        {"mode": "data", "type": "kubernetes_resource", "name": "vmclass", "instances": []},
    )
    (tmp_path / "base.json").write_text(base)
    sources.append(str(tmp_path / "base.json"))
    for module in layout.modules:
        if module.module == "base-infrastructure":
            continue
        kinds = {dvp.DISK: "VirtualDisk", dvp.SECRET: "Secret", dvp.VM: "VirtualMachine"}
        objects = [(kinds[d.kind], names[d.key]) for d in module.resources]
        file = tmp_path / f"{module.node_name}.json"
        file.write_text(node_state(kube, namespace, objects))
        sources.append(f"{module.node_name}={file}")
    made = cluster_resources(kube, namespace, prefix)

    async def act(action: str, **more: Any) -> LayoutResult:
        input = layout_input(action, path, prefix, cluster_uuid).model_copy(update=more)
        task_queue = dvp_layout_settings.temporal.task_queue
        return await run_layout(dvp_client, task_queue, input, poll_s=0.2)

    before = dvp_requests()
    adopted = await act("adopt", state=state_records(sources, STATE_TYPES))
    assert adopted.unmapped == []
    steps = {s.key: s for m in adopted.modules for s in m.steps}
    assert {k for k, s in steps.items() if s.action == "adopted"} == set(names)
    assert {s.action for s in steps.values()} == {"adopted", "unchanged"}  # + the lookups
    drift = {k: [c.field for c in s.changes] for k, s in steps.items() if s.changes}
    assert drift == {worker_vm: ["spec.runPolicy"]}
    assert mutating_since(before) == {"PatchSecret": 2}  # the Secrets given the node's labels
    history = await dvp_client.get_workflow_handle(f"layout/{prefix}").fetch_history()
    assert USER_DATA not in payloads(plain_json(history, dvp_client))
    assert cluster_resources(kube, namespace, prefix) == made

    repaired = await act("apply")
    changed = {s.key: s.action for m in repaired.modules for s in m.steps}
    assert {k: a for k, a in changed.items() if a != "unchanged"} == {worker_vm: "updated"}
    assert cluster_resources(kube, namespace, prefix) == made

    rv = versions(kube, namespace)
    before = dvp_requests()
    again = await act("apply")
    assert {s.action for m in again.modules for s in m.steps} == {"unchanged"}
    assert mutating_since(before) == {}
    assert versions(kube, namespace) == rv

    # a destructive change (the worker's memory): the VM replaced, its parts kept and let go
    docs = list(yaml.safe_load_all(path.read_text()))
    docs[1]["nodeGroups"][0]["instanceClass"]["virtualMachine"]["memory"]["size"] = "2Gi"
    path.write_text(yaml.safe_dump_all(docs))
    [new_vm] = [
        d
        for d in define(path, prefix, cluster_uuid).module("static-worker-0").resources
        if d.kind == dvp.VM
    ]
    replaced = await act("apply")
    actions = {s.key: s.action for m in replaced.modules for s in m.steps}
    assert {k: a for k, a in actions.items() if a != "unchanged"} == {new_vm.key: "created"}
    worker = f"{prefix}-worker-0"
    assert kube.get(r.VIRTUAL_MACHINES, names[worker_vm], namespace) is None
    parts = [
        (r.VIRTUAL_DISKS, n) for k, n in names.items() if k.startswith(f"{dvp.DISK}/{worker}-")
    ]
    parts += [(r.SECRETS, n) for k, n in names.items() if k.startswith(f"{dvp.SECRET}/{worker}-")]
    assert len(parts) == 2
    for kind, name in parts:
        part = kube.get(kind, name, namespace)
        assert part is not None and not part["metadata"].get("ownerReferences")

    # a part gone out of band (the master's Secret): its VM is still found and destroyed
    [gone] = [k for k in names if k.startswith(f"{dvp.SECRET}/{prefix}-master-0-")]
    kube.delete(r.SECRETS, names[gone], namespace)
    await act("destroy")

    async def nothing_left() -> bool:
        return cluster_resources(kube, namespace, prefix) == []

    await eventually_async(nothing_left, timeout=60)


async def test_a_layout_with_this_modules_earlier_names_is_found_not_duplicated(
    dvp_stack: tuple[LocalStack, DvpParent],
    dvp_client: Client,
    dvp_layout_settings: Settings,
    dvp_worker: None,
    tmp_path: Path,
) -> None:
    _, parent = dvp_stack
    kube = parent.kube
    namespace = parent.new_namespace("upgrade")
    prefix, cluster_uuid = f"d{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = dvp_config(tmp_path, parent, namespace, prefix)
    layout = define(path, prefix, cluster_uuid)
    config = validate_document(list(yaml.safe_load_all(path.read_text()))[1])
    assert isinstance(config, DVPClusterConfiguration)

    def old_name(d: ResourceDef) -> str:  # other hashes in every node object's name
        return d.name if d.kind == dvp.NETWORK_POLICY else d.name[:-6] + "a1b2c3"

    def old_annotations(d: ResourceDef) -> dict[str, str]:
        """This module's earlier destructive-parameters annotation (its own JSON shape)."""
        vm = d.properties["destructive"]["virtualMachine"]
        old = {
            "cpu": vm["cpu"],
            "memory": vm["memory"]["size"],
            "nodeSelector": vm["nodeSelector"],
            "tolerations": vm["tolerations"] or [],
            "priorityClassName": vm["priorityClassName"],
            "ipAddress": "Auto",
            "sshKey": dvp.sha256_hex(config.sshPublicKey.strip()),
            "disks": ["old-names"],
        }
        text = json.dumps(old, sort_keys=True, separators=(",", ":"))
        return {
            dvp.DESTRUCTIVE_ANNOTATION: text,
            dvp.DESTRUCTIVE_HASH_ANNOTATION: dvp.sha256_hex(text)[:6],
        }

    names = make(kube, namespace, layout, old_name, old_annotations, upstream=False)
    assert len([k for k, n in names.items() if n != k.partition("/")[2]]) == 7
    made = cluster_resources(kube, namespace, prefix)

    async def act(action: str) -> LayoutResult:
        task_queue = dvp_layout_settings.temporal.task_queue
        input = layout_input(action, path, prefix, cluster_uuid)
        return await run_layout(dvp_client, task_queue, input, poll_s=0.2)

    async def running() -> bool:
        items = kube.list(r.VIRTUAL_MACHINES, namespace).get("items") or []
        return len(items) == 2 and all(
            (o.get("status") or {}).get("phase") == "Running" for o in items
        )

    await eventually_async(running, timeout=60)
    rv = versions(kube, namespace)
    before = dvp_requests()
    applied = await act("apply")
    assert {s.action for m in applied.modules for s in m.steps} == {"unchanged"}
    assert mutating_since(before) == {}
    assert versions(kube, namespace) == rv
    assert cluster_resources(kube, namespace, prefix) == made

    # a destructive change (the master's cores), judged by the annotation: the VM is replaced
    docs = list(yaml.safe_load_all(path.read_text()))
    docs[1]["masterNodeGroup"]["instanceClass"]["virtualMachine"]["cpu"]["cores"] += 1
    path.write_text(yaml.safe_dump_all(docs))
    changed = define(path, prefix, cluster_uuid)
    [new_vm] = [d for d in changed.module("master-0").resources if d.kind == dvp.VM]
    applied = await act("apply")
    actions = {s.key: s.action for m in applied.modules for s in m.steps}
    assert {k: a for k, a in actions.items() if a != "unchanged"} == {new_vm.key: "created"}
    [vm] = [
        o
        for o in kube.list(r.VIRTUAL_MACHINES, namespace)["items"]
        if o["metadata"]["labels"][r.HOSTNAME_LABEL] == f"{prefix}-master-0"
    ]
    assert vm["metadata"]["name"] == new_vm.name
    annotations = vm["metadata"]["annotations"]
    assert annotations == new_vm.properties["created_annotations"]
    disks = [b["name"] for b in vm["spec"]["blockDeviceRefs"]]
    assert disks == [names[d.key] for d in changed.module("master-0").resources[:2]]
    left = versions(kube, namespace)
    assert len(left) == len(rv) and {k: v for k, v in left.items() if "master-0" not in k} == {
        k: v for k, v in rv.items() if "master-0" not in k
    }

    await act("destroy")

    async def nothing_left() -> bool:
        return cluster_resources(kube, namespace, prefix) == []

    await eventually_async(nothing_left, timeout=60)
