"""The parent DVP cluster of the local stack: the virtualization CRDs it serves (test stack only;
the product never installs them). The simulator is :mod:`devstack.dvp_simulator`.

:func:`served_resources` reads the resources (group, served version, plural, kind, scope) from
that YAML, so the simulator names what the parent serves, not what the driver believes: a typo
in the driver's constants is then a failing call and a failing test, not a shared mistake.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

from cloudloop.kube.resources import Resource

#: Minimal ``virtualization.deckhouse.io/v1alpha2`` CRDs (VM, disks, attachments, images, classes).
VIRTUALIZATION_CRDS = Path(__file__).parent / "virtualization-crds.yaml"


@cache
def served_resources() -> dict[str, Resource]:
    """Kind → resource of every CRD in :data:`VIRTUALIZATION_CRDS` (its storage version)."""
    found: dict[str, Resource] = {}
    for crd in yaml.safe_load_all(VIRTUALIZATION_CRDS.read_text()):
        if not crd or crd.get("kind") != "CustomResourceDefinition":
            continue
        spec = crd["spec"]
        names = spec["names"]
        [version] = [v["name"] for v in spec["versions"] if v.get("storage")]
        found[names["kind"]] = Resource(
            spec["group"],
            version,
            names["plural"],
            names["kind"],
            namespaced=spec["scope"] == "Namespaced",
        )
    return found
