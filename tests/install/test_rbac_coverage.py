"""The chart's RBAC covers every Kubernetes call the product's code makes, per process.

The calls come from the source (:mod:`tests.install.kubecalls`): each ``Kube`` verb, raw request
and informer in ``cloudloop/``, ``starters/``, ``activities/`` and ``workers/``, attributed to
the process that runs it. For every provider's rendered chart, each call a process can make
with that provider (termination only where the cloud has a termination handler, machines only
with Cluster API kinds, registration only with registration Secrets) must be allowed by the rules
bound to the process's ServiceAccount. A call whose resource is not a module-level constant
(``ref.resource``) is declared in :data:`DYNAMIC` with what it reaches; a new one fails until it is
declared, so chart and code cannot drift. The live install test checks the names and that no rule
goes unused (``test_chart_live.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from cloudloop.cloud.provider import Provider
from cloudloop.cloud.registry import PROVIDERS
from cloudloop.kube.resources import CLOUD_PROBES, NODE_GROUPS, SERVICES, Resource
from cloudloop.rules.machine import CLUSTERS, MACHINE_DEPLOYMENTS, MACHINES
from tests.install.chart import CHART, Helm, Rules, find, render
from tests.install.kubecalls import kube_calls, processes_of_call

PROCESSES = {
    "worker": ("Deployment", "-worker"),
    "starter": ("Deployment", "-starter"),
    "csi-controller": ("Deployment", "-csi-controller"),
    "csi-node": ("DaemonSet", "-csi-node"),
    "nth-imds": ("DaemonSet", "-nth-imds"),
}
#: Processes only some clouds run: the IMDS node agent where the cloud has a metadata service.
RUNS_WITH: dict[str, Callable[[Provider[Any]], bool]] = {
    "nth-imds": lambda provider: provider.instance_metadata is not None,
}
#: Not the chart's: the DVP parent cluster (its own kubeconfig), a user's CLI, a destroyed
#: layout's cluster (the kubeconfig given to ``layout destroy``).
ELSEWHERE = {"parent", "cli", "layout-cluster"}
#: Symbolic resources of :data:`DYNAMIC`, one per provider with Cluster API kinds.
INFRA_MACHINE, INFRA_CLUSTER = "infra:machine", "infra:cluster"
#: ... and its InfraMachineTemplate and InstanceClass kinds (the node-group reconciler's).
INFRA_TEMPLATE, INSTANCE_CLASS = "infra:template", "instance-class"
Target = Resource[Any] | str
#: Calls whose resource is a parameter: ``module:function`` -> process -> (resource, subresource,
#: verb) reached. ``None``: plumbing whose callers name the resource (informers), scanned there.
DYNAMIC: dict[str, dict[str, list[tuple[Target, str, str]]] | None] = {
    "cloudloop.kube.informer:_relist": None,
    "cloudloop.kube.informer:get": None,
    # add_finalizer / remove_finalizer: Services (load balancers) and InfraMachines.
    "cloudloop.kube.finalizers:_patch_finalizers": {
        "starter": [
            (SERVICES, "", "patch"),
            (INFRA_MACHINE, "", "patch"),
            (NODE_GROUPS, "", "patch"),
        ],
        "worker": [(SERVICES, "", "patch"), (INFRA_MACHINE, "", "patch")],
    },
    "cloudloop.kube.finalizers:_fresh": {
        "starter": [(SERVICES, "", "get"), (INFRA_MACHINE, "", "get"), (NODE_GROUPS, "", "get")],
        "worker": [(SERVICES, "", "get"), (INFRA_MACHINE, "", "get")],
    },
    "starters.machine.infra_cluster:reconcile": {"starter": [(INFRA_CLUSTER, "status", "patch")]},
    "starters.machine.paused:report_paused": {
        "starter": [(INFRA_MACHINE, "status", "patch"), (INFRA_CLUSTER, "status", "patch")]
    },
    "starters.machine.starter:informer": {
        "starter": [
            (r, "", verb)
            for r in (
                INFRA_MACHINE,
                INFRA_CLUSTER,
                MACHINES,
                CLUSTERS,
                NODE_GROUPS,
                INSTANCE_CLASS,
                MACHINE_DEPLOYMENTS,
            )
            for verb in ("list", "watch")
        ]
    },
    "starters.machine.node_group:_apply": {
        "starter": [(INFRA_TEMPLATE, "", "get"), (INFRA_TEMPLATE, "", "create")]
    },
    "starters.machine.node_group:_delete": {
        "starter": [(INFRA_TEMPLATE, "", "list"), (INFRA_TEMPLATE, "", "delete")]
    },
    "starters.machine.node_group:reconcile_class": {
        "starter": [(INSTANCE_CLASS, "status", "patch")]
    },
    "starters.machine.starter:_not_served": {
        "starter": [
            (INFRA_MACHINE, "", "list"),
            (MACHINES, "", "list"),
            (NODE_GROUPS, "", "list"),
            (MACHINE_DEPLOYMENTS, "", "list"),
            (INSTANCE_CLASS, "", "list"),
        ]
    },
    # PatchStatus: the CloudProbe's status (workflows/probe.py).
    "activities.kube:_patch_status": {
        "worker": [(CLOUD_PROBES, "", "get"), (CLOUD_PROBES, "status", "patch")]
    },
    "activities.loadbalancer:_write_ingress": {"worker": [(SERVICES, "status", "patch")]},
    # OCCM's load-balancer-id (and -address) written back onto the Service.
    "activities.loadbalancer:_write_annotations": {"worker": [(SERVICES, "", "patch")]},
    "activities.machine:_write": {
        "worker": [
            (INFRA_MACHINE, "", "get"),
            (INFRA_MACHINE, "", "patch"),
            (INFRA_MACHINE, "status", "patch"),
        ]
    },
}


def feature_applies(module: str, provider: Provider[Any]) -> bool:
    """Whether code of ``module`` runs with ``provider`` (one noun per feature in each folder)."""
    if ".termination" in module:
        return provider.termination is not None
    if ".machine" in module:
        return provider.infra_kinds is not None
    if ".registration" in module:
        return provider.registration is not None or provider.node_templates is not None
    return True


def needed(provider: Provider[Any]) -> dict[str, set[tuple[str, str, str, str]]]:
    """process -> (verb, group, resource[/sub], where) the code needs with ``provider``."""
    found: dict[str, set[tuple[str, str, str, str]]] = {p: set() for p in PROCESSES}
    kinds = provider.infra_kinds

    def target(resource: Target) -> Resource[Any] | None:
        if isinstance(resource, Resource):
            return resource
        if kinds is None:
            return None
        if resource == INSTANCE_CLASS:
            templates = provider.node_templates
            return templates.instance_class if templates is not None else None
        if resource == INFRA_TEMPLATE:
            return kinds.template
        return kinds.machine if resource == INFRA_MACHINE else kinds.cluster

    for call in kube_calls():
        processes = processes_of_call(call) - ELSEWHERE
        if not processes or not feature_applies(call.module, provider):
            continue
        if call.resource is not None:
            for process in processes:
                found[process].add((call.verb, call.resource.group, call.rbac_resource, call.where))
            continue
        for process, reached in (DYNAMIC[f"{call.module}:{call.function}"] or {}).items():
            for resource, sub, verb in reached:
                resolved = target(resource)
                if resolved is not None:
                    plural = f"{resolved.plural}/{sub}" if sub else resolved.plural
                    found[process].add((verb, resolved.group, plural, call.where))
    return found


def allows(rules: Rules, verb: str, group: str, resource: str) -> bool:
    """Some rule bound to the account allows it (anywhere; names are the live test's)."""
    return any(
        verb in rule.get("verbs", [])
        and group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        for _, rule in rules.all()
    )


def test_every_call_with_a_computed_resource_is_declared() -> None:
    undeclared = sorted(
        call.where
        for call in kube_calls()
        if call.resource is None
        and processes_of_call(call) - ELSEWHERE
        and f"{call.module}:{call.function}" not in DYNAMIC
    )
    declared_but_gone = sorted(
        set(DYNAMIC) - {f"{c.module}:{c.function}" for c in kube_calls() if c.resource is None}
    )

    assert undeclared == [], "declare what these reach in DYNAMIC"
    assert declared_but_gone == []


def test_the_scan_finds_the_calls_of_every_process() -> None:
    seen = {p for call in kube_calls() for p in processes_of_call(call)}

    assert set(PROCESSES) <= seen


@pytest.mark.parametrize("provider", sorted(PROVIDERS), ids=sorted(PROVIDERS))
def test_the_chart_allows_every_call_the_code_makes(helm: Helm, provider: str) -> None:
    # every feature on: the converge's rules come with layouts.converge.enabled
    docs = render(helm, provider, {"layouts.converge.enabled": "true"}, namespace="cloudloop")
    missing = []
    for process, calls in needed(PROVIDERS[provider]).items():
        runs = RUNS_WITH.get(process)
        if runs is not None and not runs(PROVIDERS[provider]):
            continue
        kind, suffix = PROCESSES[process]
        account = find(docs, kind, suffix)["spec"]["template"]["spec"]["serviceAccountName"]
        rules = Rules.bound_to(docs, "cloudloop", account)
        missing += [
            f"{process}: {verb} {group or 'core'}/{resource} ({where})"
            for verb, group, resource, where in sorted(calls)
            if not allows(rules, verb, group, resource)
        ]

    assert missing == []


@pytest.mark.parametrize("provider", sorted(PROVIDERS), ids=sorted(PROVIDERS))
def test_the_starter_may_write_the_node_manager_secrets_by_name(helm: Helm, provider: str) -> None:
    record = PROVIDERS[provider]
    names = [
        s["metadata"]["name"] for s in (record.registration or (lambda _: []))(record.settings())
    ]
    if record.node_templates is not None:
        names.append(record.node_templates.secret()["metadata"]["name"])
    docs = render(helm, provider)
    role = find(docs, "Role", "-cloud-data")
    allowed = {
        name
        for rule in role["rules"]
        if "secrets" in rule["resources"] and {"get", "patch"} <= set(rule["verbs"])
        for name in rule.get("resourceNames") or []
    }
    chart = yaml.safe_load((CHART / "values.yaml").read_text())["providers"][provider]

    assert set(names) <= allowed
    assert sorted(chart["registrationSecrets"]) == sorted(names)


# -- VolumeSnapshots (issue 29) ---------------------------------------------------------------
def upstream_snapshotter_rules() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """csi-snapshotter's documented RBAC at the version the stack builds (its
    ``deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml``, from the Go module cache):
    (ClusterRole rules, Role rules), volume group snapshots left out (the chart turns them off)."""
    from devstack import gotools

    source = gotools.module_source(
        "external-snapshotter", "github.com/kubernetes-csi/external-snapshotter/v8"
    )
    path = source / "deploy" / "kubernetes" / "csi-snapshotter" / "rbac-csi-snapshotter.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    cluster = [
        rule
        for d in docs
        if d["kind"] == "ClusterRole"
        for rule in d["rules"]
        if "groupsnapshot.storage.k8s.io" not in rule["apiGroups"]
    ]
    namespaced = [rule for d in docs if d["kind"] == "Role" for rule in d["rules"]]
    return cluster, namespaced


def test_the_csi_controller_gets_csi_snapshotters_upstream_rbac(helm: Helm) -> None:
    docs = render(helm, "aws", namespace="cloudloop")
    account = find(docs, "Deployment", "-csi-controller")["spec"]["template"]["spec"][
        "serviceAccountName"
    ]
    rules = Rules.bound_to(docs, "cloudloop", account)
    cluster, namespaced = upstream_snapshotter_rules()
    missing = [
        f"{verb} {group or 'core'}/{resource}"
        for rule in [*cluster, *namespaced]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if not allows(rules, verb, group, resource)
    ]

    assert {r for rule in cluster for r in rule["resources"]} >= {
        "volumesnapshotcontents",
        "volumesnapshotcontents/status",
        "volumesnapshotclasses",
        "events",
    }
    assert missing == []
