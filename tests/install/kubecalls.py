"""The Kubernetes API calls the product's code makes, found in its source: the RBAC it needs.

Every call on a :class:`~cloudloop.kube.api.Kube` (``get``/``list``/``create``/``patch``/
``delete``, ``request(METHOD, X.path(...))``) and every informer (``Informer(kube, X)``,
``Informer[Body](kube, X)``, ``informers.get(X)``, the typed ``informers.nodes()`` and
``informers.services()``: list and watch) in ``cloudloop/``, ``starters/``, ``activities/`` and
``workers/`` becomes a :class:`KubeCall`: the module and function, the RBAC verb, and the
:class:`~cloudloop.kube.resources.Resource` when the argument is a module-level constant (else
the source text of the argument, for the caller to resolve).

Which process makes a call follows from where it is: ``starters/`` the starter, ``activities/``
and ``workers/`` the worker, the CSI modules their process, a helper module (``cloudloop/kube/``)
every process of the modules that import it; ``cloudloop/cloud/dvp/`` talks to the parent
cluster with its own kubeconfig.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudloop.kube.resources import NODES, SERVICES, Resource

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("cloudloop", "starters", "activities", "workers")
VERBS = ("get", "list", "create", "patch", "delete")
METHODS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
#: Modules run by one process whatever imports them.
PROCESS_OF_MODULE = {
    "cloudloop.csi.objects": {"csi-controller"},
    "cloudloop.csi.server": {"csi-node"},
    # `cloudloop termination-imds`: the chart's nth-imds DaemonSet (its own ServiceAccount).
    "cloudloop.nodeagents.termination_imds": {"nth-imds"},
    # `cloudloop retry machine`: run by a user with the user's own credentials.
    "starters.machine.retry": {"cli"},
    # `cloudloop layout plan|apply|adopt --kubeconfig`: the user's CLI reads the Terraform state
    # Secrets and publishes the layout's outputs with the user's own credentials.
    "starters.layout": {"cli"},
    # `cloudloop layout destroy --kubeconfig`: the Destroy workflow deletes the layout's own
    # cluster's Services, volumes and machines with the kubeconfig the user handed over.
    "activities.layout_cluster": {"layout-cluster"},
}
#: Modules talking to another cluster than the one the chart is installed in.
PARENT_CLUSTER = "cloudloop.cloud.dvp."
KUBE_RECEIVER = re.compile(r"(?i)kube\b|Kube\(")
#: ``Informers``' typed accessors and the resource each one watches.
TYPED_INFORMERS: dict[str, Resource[Any]] = {"nodes": NODES, "services": SERVICES}


@dataclass(frozen=True)
class KubeCall:
    module: str
    function: str
    line: int
    verb: str
    #: The resource, when the call names a module-level constant.
    resource: Resource[Any] | None
    subresource: str
    #: The argument's source (``ref.resource``) when it is not a constant.
    expression: str

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line} ({self.function})"

    @property
    def rbac_resource(self) -> str:
        assert self.resource is not None
        plural = self.resource.plural
        return f"{plural}/{self.subresource}" if self.subresource else plural


@functools.cache
def product_modules() -> dict[str, Path]:
    modules = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _resolve(module: str, node: ast.expr, local: dict[str, str]) -> Resource[Any] | None:
    """The Resource a Name or dotted Attribute names in ``module``'s globals (or one its
    functions import), else None."""
    if not isinstance(node, ast.Name | ast.Attribute):
        return None
    chain: ast.expr = node
    while isinstance(chain, ast.Attribute):
        chain = chain.value
    if not isinstance(chain, ast.Name):
        return None
    namespace = dict(vars(importlib.import_module(module)))
    if chain.id not in namespace and chain.id in local:
        namespace[chain.id] = getattr(importlib.import_module(local[chain.id]), chain.id)
    try:
        value = eval(compile(ast.Expression(node), module, "eval"), namespace)
    except Exception:
        return None
    return value if isinstance(value, Resource) else None


class _Visitor(ast.NodeVisitor):
    def __init__(self, module: str, tree: ast.Module) -> None:
        self.module = module
        #: Names imported anywhere in the module (function-local imports included).
        self.local = {
            alias.asname or alias.name: imported.module
            for imported in ast.walk(tree)
            if isinstance(imported, ast.ImportFrom) and imported.module and imported.level == 0
            for alias in imported.names
        }
        self.function = "<module>"
        self.calls: list[KubeCall] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def add(self, verb: str, arg: ast.expr, subresource: str, line: int) -> None:
        self.calls.append(
            KubeCall(
                self.module,
                self.function,
                line,
                verb,
                _resolve(self.module, arg, self.local),
                subresource,
                ast.unparse(arg),
            )
        )

    def visit_Call(self, node: ast.Call) -> None:
        self._call(node)
        if ast.unparse(node.func).endswith("to_thread") and node.args:
            # asyncio.to_thread(kube.patch, NODES, ...): the same call, run in a thread.
            self._call(ast.Call(node.args[0], node.args[1:], node.keywords, lineno=node.lineno))
        self.generic_visit(node)

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Subscript):  # Informer[Node](kube, NODES): the class, typed
            func = func.value
        if isinstance(func, ast.Name) and func.id == "Informer" and len(node.args) >= 2:
            for verb in ("list", "watch"):
                self.add(verb, node.args[1], "", node.lineno)
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in TYPED_INFORMERS
            and ast.unparse(func.value).endswith("informers")
        ):
            resource = TYPED_INFORMERS[func.attr]
            for verb in ("list", "watch"):
                self.calls.append(
                    KubeCall(
                        self.module,
                        self.function,
                        node.lineno,
                        verb,
                        resource,
                        "",
                        ast.unparse(node),
                    )
                )
        elif isinstance(func, ast.Attribute) and node.args:
            receiver = ast.unparse(func.value)
            if func.attr == "get" and receiver.endswith("informers"):
                for verb in ("list", "watch"):
                    self.add(verb, node.args[0], "", node.lineno)
            elif func.attr in VERBS and KUBE_RECEIVER.search(receiver):
                verb = func.attr
                if verb == "get" and not _has_name(node):
                    verb = "list"
                sub = next(
                    (
                        k.value.value
                        for k in node.keywords
                        if k.arg == "subresource" and isinstance(k.value, ast.Constant)
                    ),
                    "",
                )
                self.add(verb, node.args[0], str(sub or ""), node.lineno)
            elif func.attr == "request" and KUBE_RECEIVER.search(receiver):
                self._request(node)

    def _request(self, node: ast.Call) -> None:
        method, path = [*node.args, None, None][:2]
        if not isinstance(method, ast.Constant) or not isinstance(path, ast.Call):
            return  # a non-resource URL (TokenReview, SubjectAccessReview): not a Resource call
        target = path.func
        if not (isinstance(target, ast.Attribute) and target.attr == "path"):
            return
        sub = path.args[2] if len(path.args) >= 3 else None
        subresource = sub.value if isinstance(sub, ast.Constant) and sub.value else ""
        verb = METHODS.get(str(method.value), "get")
        self.add(verb, target.value, str(subresource), node.lineno)


def _has_name(node: ast.Call) -> bool:
    """``kube.get(R, name)``: the second positional argument is the name."""
    return len(node.args) >= 2


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def kube_calls() -> list[KubeCall]:
    return list(_kube_calls())


@functools.cache
def _kube_calls() -> tuple[KubeCall, ...]:
    calls: list[KubeCall] = []
    for module, path in product_modules().items():
        tree = _parsed(path)
        visitor = _Visitor(module, tree)
        visitor.visit(tree)
        calls += visitor.calls
    return tuple(calls)


@functools.cache
def importers() -> dict[str, set[str]]:
    """module -> the product modules that import it (``import m``, ``from m import x``); parsed
    on first use, not when a test module importing this one is collected."""
    found: dict[str, set[str]] = {}
    for module, path in product_modules().items():
        for node in ast.walk(_parsed(path)):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                found.setdefault(name, set()).add(module)
    return found


@functools.cache
def top_level_functions(module: str) -> set[str]:
    tree = _parsed(product_modules()[module])
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def processes_of_call(call: KubeCall) -> set[str]:
    """The processes that make ``call``: a public function of a helper module is run by the
    processes of the modules importing that function by name (none: no process runs it);
    anything else by those of the modules importing its module."""
    module, function = call.module, call.function
    helper = processes_of(module) if module.split(".")[0] != "cloudloop" else set()
    if helper or module in PROCESS_OF_MODULE or module.startswith(PARENT_CLUSTER):
        return processes_of(module)
    if not function.startswith("_") and function in top_level_functions(module):
        found: set[str] = set()
        for importer in importers().get(f"{module}.{function}", set()):
            found |= processes_of(importer)
        return found
    return processes_of(module)


def processes_of(module: str, _seen: frozenset[str] = frozenset()) -> set[str]:
    """The processes whose code runs ``module`` (its importers', for a helper module)."""
    if module in PROCESS_OF_MODULE:
        return set(PROCESS_OF_MODULE[module])
    root = module.split(".")[0]
    if root == "starters":
        return {"starter"}
    if root in ("activities", "workers"):
        return {"worker"}
    if module.startswith(PARENT_CLUSTER):
        return {"parent"}
    found: set[str] = set()
    for importer in importers().get(module, set()) - _seen:
        found |= processes_of(importer, _seen | {module})
    return found
