"""The Helm chart as the install tests use it: helm itself, rendering, RBAC rules, pod processes.

:class:`Helm` runs the real helm (v3.22, a Go tool built like the stack's) with its cache, config
and data homes in a temporary folder. :func:`render` returns the chart's manifests for a values
file. :class:`Rules` decides, as the apiserver's RBAC authorizer does, whether the rendered roles
allow a request. :class:`PodProcess` starts ``cloudloop`` with exactly the args, env and mounted
files of a rendered Deployment's container: mounted ConfigMaps and Secrets are written under a
root folder that stands in for the container's file system (absolute mount paths in args, env and
the mounted files are moved under it), and ``KUBECONFIG`` (a token of the pod's ServiceAccount)
stands in for the in-cluster credentials.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devstack import gotools

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "cloudloop"
VALUES = REPO / "deploy" / "helm" / "values"
KUBE_VERSION = gotools.K8S_VERSION.lstrip("v")


def provider_values() -> dict[str, Path]:
    """Each provider's example values file (``deploy/helm/values/<provider>.yaml``)."""
    return {path.stem: path for path in sorted(VALUES.glob("*.yaml"))}


#: ``helm template`` once per distinct command line in a test process: the chart and the values
#: files are the repository's, unchanged while the tests run (a ``--set-file`` names a test's own
#: temporary path, so it is never shared); the output does not depend on the helm home.
_TEMPLATES: dict[tuple[tuple[str, ...], bool], subprocess.CompletedProcess[str]] = {}


@dataclass(frozen=True)
class Helm:
    home: Path

    @property
    def binary(self) -> Path:
        return gotools.ensure_built(["helm"])["helm"]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        result = subprocess.run(
            [str(self.binary), *args], env=env, capture_output=True, text=True, timeout=120
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result

    def template(
        self,
        values: list[Path],
        sets: dict[str, str] | None = None,
        *,
        files: dict[str, Path] | None = None,
        namespace: str = "cloudloop",
        release: str = "cloudloop",
        check: bool = True,
        api_versions: tuple[str, ...] = (),
    ) -> subprocess.CompletedProcess[str]:
        args = ["template", release, str(CHART), "--namespace", namespace]
        args += ["--kube-version", KUBE_VERSION, "--include-crds"]
        for api_version in api_versions:  # what the cluster serves beyond Kubernetes (CRDs)
            args += ["--api-versions", api_version]
        for path in values:
            args += ["--values", str(path)]
        for key, value in (sets or {}).items():
            args += ["--set", f"{key}={value}"]
        for key, path in (files or {}).items():
            args += ["--set-file", f"{key}={path}"]
        command = (tuple(args), check)
        if command not in _TEMPLATES:
            _TEMPLATES[command] = self.run(*args, check=check)
        return _TEMPLATES[command]


#: libyaml's loader (PyYAML's wheels carry it): a chart render with the CRDs is ~6,000 lines,
#: which the pure-Python loader takes ~10 times as long to read.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]


def render(
    helm: Helm, provider: str, sets: dict[str, str] | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    """The manifests of ``provider``'s values file (credential files filled with placeholders)."""
    base = {"clusterName": "install-test"}
    for key in _credential_keys(provider):
        base[f"cloud.credentials.files.{key.replace('.', chr(92) + '.')}"] = "placeholder"
    return documents(
        helm.template([provider_values()[provider]], {**base, **(sets or {})}, **kwargs).stdout
    )


def _credential_keys(provider: str) -> list[str]:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    return list(chart_values["providers"][provider]["credentialFiles"].values())


def find(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"{kind} *{name_suffix}: {[d['metadata']['name'] for d in found]}"
    return found[0]


# -- RBAC -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """One API request as RBAC sees it (from the apiserver's audit log)."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass
class Rules:
    """The rules bound to one ServiceAccount: cluster-wide ones and per-namespace ones."""

    cluster: list[dict[str, Any]] = field(default_factory=list)
    namespaced: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def bound_to(cls, docs: list[dict[str, Any]], namespace: str, account: str) -> Rules:
        roles = {
            (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs
        }
        rules = cls()
        for binding in docs:
            if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            subjects = binding.get("subjects") or []
            if not any(
                s["kind"] == "ServiceAccount"
                and s["name"] == account
                and s["namespace"] == namespace
                for s in subjects
            ):
                continue
            ref = binding["roleRef"]
            where = binding["metadata"].get("namespace", "")
            role = roles[(ref["kind"], where if ref["kind"] == "Role" else "", ref["name"])]
            if binding["kind"] == "ClusterRoleBinding":
                rules.cluster += role.get("rules") or []
            else:
                rules.namespaced.setdefault(where, []).extend(role.get("rules") or [])
        return rules

    def all(self) -> list[tuple[str, dict[str, Any]]]:
        """Every rule with where it applies (``""``: cluster-wide)."""
        return [("", r) for r in self.cluster] + [
            (ns, r) for ns, rules in self.namespaced.items() for r in rules
        ]

    def allows(self, request: Request) -> bool:
        return any(
            _matches(rule, request)
            for where, rule in self.all()
            if where in ("", request.namespace)
        )

    def matching(self, request: Request) -> list[tuple[str, dict[str, Any]]]:
        return [
            (where, rule)
            for where, rule in self.all()
            if where in ("", request.namespace) and _matches(rule, request)
        ]


def _matches(rule: dict[str, Any], request: Request) -> bool:
    def has(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    if not has(rule.get("verbs") or [], request.verb):
        return False
    if not has(rule.get("apiGroups") or [], request.group):
        return False
    if not has(rule.get("resources") or [], request.full_resource):
        return False
    names = rule.get("resourceNames") or []
    return not names or request.name in names


# -- processes from a rendered Deployment ---------------------------------------------------
def container(deployment: dict[str, Any], name: str = "") -> dict[str, Any]:
    """The workload's container ``name`` (its only container when no name is given)."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    if name:
        return dict(next(c for c in containers if c["name"] == name))
    assert len(containers) == 1
    return dict(containers[0])


@dataclass
class PodProcess:
    """``cloudloop`` run with a rendered Deployment's container args, env and mounted files."""

    deployment: dict[str, Any]
    manifests: list[dict[str, Any]]
    root: Path
    kubeconfig: Path
    #: Stand-ins for what a pod has and a process on this host does not (its own network
    #: namespace: the metrics port; its own name).
    overrides: dict[str, str] = field(default_factory=dict)
    #: The container of a pod with sidecars (``csi-controller``); the only one when empty.
    container_name: str = ""
    process: subprocess.Popen[bytes] | None = None

    @property
    def spec(self) -> dict[str, Any]:
        return container(self.deployment, self.container_name)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def log(self) -> Path:
        return self.root / f"{self.name}.log"

    def _mounts(self) -> dict[str, Path]:
        pod = self.deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in self.spec.get("volumeMounts") or []:
            mounts[mount["mountPath"]] = self.root / mount["mountPath"].lstrip("/")
            volume = volumes[mount["name"]]
            target = mounts[mount["mountPath"]]
            target.mkdir(parents=True, exist_ok=True)
            for key, data in self._volume_files(volume).items():
                (target / key).write_text(data)
        return mounts

    def _volume_files(self, volume: dict[str, Any]) -> dict[str, str]:
        if "configMap" in volume:
            source = self._object("ConfigMap", volume["configMap"]["name"])
            return dict(source.get("data") or {})
        if "secret" in volume:
            source = self._object("Secret", volume["secret"]["secretName"])
            files = dict(source.get("stringData") or {})
            for key, value in (source.get("data") or {}).items():
                files[key] = base64.b64decode(value).decode()
            return files
        return {}  # emptyDir

    def _object(self, kind: str, name: str) -> dict[str, Any]:
        for doc in self.manifests:
            if doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc
        raise AssertionError(
            f"the Deployment mounts {kind} {name}, which the chart does not render"
        )

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of the container, with mount paths moved under ``root``."""
        mounts = self._mounts()

        # One pass, longest mount first, only where a path starts: a moved path is not moved again.
        pattern = re.compile(
            r"(?<![\w/.-])("
            + "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
            + r")(?=/|$|[\s\"'])",
            re.MULTILINE,
        )

        def relocate(text: str) -> str:
            return pattern.sub(lambda m: str(mounts[m.group(1)]), text)

        for target in mounts.values():
            for file in target.iterdir():
                if file.is_file():
                    file.write_text(relocate(file.read_text()))
        spec = self.spec
        pod_name = f"{self.deployment['metadata']['name']}-test"
        fields = {
            "metadata.name": pod_name,
            "metadata.namespace": self.deployment["metadata"]["namespace"],
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDLOOP_")}
        for entry in spec.get("env") or []:
            if entry["name"] in self.overrides:
                continue
            if "value" in entry:
                env[entry["name"]] = relocate(str(entry["value"]))
            else:
                env[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        env["KUBECONFIG"] = str(self.kubeconfig)
        env.update(self.overrides)
        cloudloop = str(Path(sys.executable).parent / "cloudloop")
        argv = [cloudloop, *[relocate(a) for a in spec.get("args") or []]]
        return argv, env

    def start(self) -> PodProcess:
        argv, env = self.command()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running(*processes: PodProcess) -> Iterator[tuple[PodProcess, ...]]:
    try:
        for process in processes:
            process.start()
        yield processes
    finally:
        for process in processes:
            process.stop()
