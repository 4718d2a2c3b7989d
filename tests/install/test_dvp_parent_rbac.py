"""``deploy/rbac/dvp-parent.yaml`` covers every call the DVP driver makes in the parent cluster.

The DVP driver (VMs, disks, attachments, cloud-init Secrets, and its load balancer's Services and
EndpointSlices) talks only to the parent cluster, with the parent kubeconfig from the credentials
Secret; the child chart grants nothing for it. Its calls go through the session's verbs
(``self.session.get``/``exists``, ``list_objects``, ``create``, ``patch``, ``delete`` in the
capability objects, ``self.<verb>`` in the session itself; the layouts' ``self.api`` calls use
the layout's own credentials and are not this role's); the scan resolves each
resource argument in the module, and the few passed as variables are declared in
:data:`VARIABLE`, so a new call fails here until the parent's role allows it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import yaml

from cloudloop.cloud.dvp import resources as r
from cloudloop.kube.resources import Resource

REPO = Path(__file__).resolve().parents[2]
PARENT_RBAC = REPO / "deploy" / "rbac" / "dvp-parent.yaml"
VERBS = {
    "get": "get",
    "exists": "get",
    "list_objects": "list",
    "list_object_pages": "list",
    "create": "create",
    "patch": "patch",
    "delete": "delete",
}
#: ``module:function`` -> the resources a variable argument takes there.
VARIABLE: dict[str, list[Resource]] = {
    "cloudloop.cloud.dvp.base:list_objects": [],  # plumbing: callers are scanned
    "cloudloop.cloud.dvp.base:exists": [],
    "cloudloop.cloud.dvp.machines:_create_or_adopt": [
        r.VIRTUAL_MACHINES,
        r.SECRETS,
        r.VIRTUAL_DISKS,
    ],
    "cloudloop.cloud.dvp.machines:_validate_references": list(r.IMAGE_RESOURCES.values()),
    "cloudloop.cloud.dvp.machines:delete_machine": [r.VIRTUAL_DISKS, r.SECRETS],
    "cloudloop.cloud.dvp.machines:_delete_object": [
        r.VIRTUAL_MACHINES,
        r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS,
        r.VIRTUAL_DISKS,
        r.SECRETS,
    ],
    "cloudloop.cloud.dvp.loadbalancers:delete_load_balancer": [r.ENDPOINT_SLICES, r.SERVICES],
}


def parent_calls() -> tuple[set[tuple[str, str, str]], list[str]]:
    """(verb, group, plural) the driver needs, and the undeclared (or stale) declarations."""
    needed: set[tuple[str, str, str]] = set()
    undeclared: list[str] = []
    used: set[str] = set()
    for path in sorted((REPO / "cloudloop" / "cloud" / "dvp").glob("*.py")):
        module = f"cloudloop.cloud.dvp.{path.stem}"
        namespace = dict(vars(importlib.import_module(module)))
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for call in ast.walk(function):
                if not (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and ast.unparse(call.func.value) in ("self", "self.session")
                    and call.func.attr in VERBS
                    and call.args
                ):
                    continue
                verb = VERBS[call.func.attr]
                try:
                    resource = eval(  # the argument as the module sees it: r.VIRTUAL_DISKS
                        compile(ast.Expression(call.args[0]), module, "eval"), namespace
                    )
                except Exception:
                    resource = None
                if isinstance(resource, Resource):
                    needed.add((verb, resource.group, resource.plural))
                    continue
                key = f"{module}:{function.name}"
                used.add(key)
                if key not in VARIABLE:
                    undeclared.append(f"{key}:{call.lineno}")
                for declared in VARIABLE.get(key, []):
                    needed.add((verb, declared.group, declared.plural))
    undeclared += [f"{key}: declared, no such call" for key in sorted(set(VARIABLE) - used)]
    return needed, undeclared


def parent_rules() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(PARENT_RBAC.read_text()) if d]
    return [rule for d in docs if d["kind"] in ("Role", "ClusterRole") for rule in d["rules"]]


def test_every_variable_resource_argument_is_declared() -> None:
    _, undeclared = parent_calls()

    assert undeclared == []


def test_the_parent_role_allows_every_call_of_the_dvp_driver() -> None:
    needed, _ = parent_calls()
    rules = parent_rules()
    missing = sorted(
        (verb, group, plural)
        for verb, group, plural in needed
        if not any(
            verb in rule["verbs"] and group in rule["apiGroups"] and plural in rule["resources"]
            for rule in rules
        )
    )

    assert needed
    assert missing == []


def test_the_parent_role_grants_nothing_the_driver_does_not_call() -> None:
    needed, _ = parent_calls()
    granted = {
        (verb, group, plural)
        for rule in parent_rules()
        for verb in rule["verbs"]
        for group in rule["apiGroups"]
        for plural in rule["resources"]
    }

    assert granted - needed == set()
