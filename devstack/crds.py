"""Installs CustomResourceDefinitions from YAML files and waits until they are served.

Dev stack only: the product never installs CRDs (the chart ships them from deploy/crds); tests,
benchmarks and ``cloudloop dev`` apply them to their local API servers through this module.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import Resource

CRDS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
#: The project's CRDs, shipped in deploy/crds.
CRD_DIR = Path(__file__).resolve().parents[1] / "deploy" / "crds"


def apply_crds(kube: Kube, paths: list[Path] | None = None, *, timeout_s: float = 30) -> list[str]:
    """Create or update every CRD in ``paths`` (default: all of deploy/crds); return their names."""
    names: list[str] = []
    for path in paths if paths is not None else sorted(CRD_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            name = doc["metadata"]["name"]
            existing = kube.get(CRDS, name)
            if existing is None:
                kube.create(CRDS, doc)
            else:
                doc["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                kube.request("PUT", CRDS.path(None, name), body=doc)
            names.append(name)
    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            crd = kube.get(CRDS, name) or {}
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                break
            if time.monotonic() > deadline:
                raise KubeError(504, "Timeout", {"message": f"CRD {name} not established"})
            time.sleep(0.1)
    return names
