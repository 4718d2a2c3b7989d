"""What the vSphere layout tests share: the stack (Temporal and vcsim with Deckhouse's region and
zone tags, a guest agent reporting IPs), a config file from the example, vSphere's call counts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY

from cloudloop.cloud.vsphere.layout_resources import MUTATING
from devstack.backends.vsphere import NETWORK, TEMPLATE
from devstack.local import LocalStack, StackOptions
from devstack.vcsim import VcsimEndpoint, VcsimOptions
from devstack.vcsim_guest import GuestAgent
from devstack.vcsim_inventory import (
    Tags,
    ZoneLayout,
    connect,
    disconnect,
    seed_zones,
    tagging_client,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
SECRET_NOTE = "the vcsim password must never reach a history or a log"
REGION, ZONES = "region-a", ["zone-a", "zone-b"]


@contextmanager
def vsphere_stack(state_dir: Path) -> Iterator[LocalStack]:
    """Temporal and vcsim (two clusters, tagged as Deckhouse expects), no moto, no control
    plane; a guest agent gives powered-on cloud-init VMs an IP."""
    local = LocalStack(StackOptions(state_dir=state_dir, moto=False, kube=(), vcsim=VcsimOptions()))
    local.start()
    try:
        assert local.vcsim is not None
        si = connect(local.vcsim)
        client = tagging_client(local.vcsim)
        try:
            seed_zones(si, Tags(client), ZoneLayout(region=REGION))
        finally:
            client.logout()
            disconnect(si)
        with GuestAgent(local.vcsim):
            yield local
    finally:
        local.stop()


def config_file(folder: Path, endpoint: VcsimEndpoint, prefix: str, **master_class: Any) -> Path:
    """The ``vsphere-standard`` example on vcsim: its CA and credentials, the region and zones
    tagged by :func:`vsphere_stack`, ``vmFolderPath`` = ``prefix``, one master and one static
    node (``worker``)."""
    docs = list(yaml.safe_load_all((EXAMPLE / "vsphere-standard.yaml").read_text()))
    assert endpoint.ca_file is not None
    instance_class = {
        "numCPUs": 2,
        "memory": 2048,
        "template": TEMPLATE,
        "mainNetwork": NETWORK,
        "datastore": "LocalDS_0",
    }
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        doc["provider"] = {
            "server": endpoint.server,
            "username": endpoint.username,
            "password": endpoint.password,
            "caBundle": endpoint.ca_file.read_text(),
        }
        doc.update(region=REGION, zones=ZONES, vmFolderPath=prefix)
        doc["masterNodeGroup"]["instanceClass"] = {**instance_class, **master_class}
        doc["nodeGroups"] = [
            {"name": "worker", "replicas": 1, "instanceClass": {**instance_class, "numCPUs": 1}}
        ]
    path = folder / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def vsphere_calls() -> dict[str, float]:
    """``cloud_api_requests_total`` of vSphere by operation, as this process counted them."""
    counts: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "cloud_api_requests":
            continue
        for sample in metric.samples:
            if sample.name == "cloud_api_requests_total" and sample.labels["provider"] == "vsphere":
                operation = sample.labels["operation"]
                counts[operation] = counts.get(operation, 0.0) + sample.value
    return counts


def calls_since(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in vsphere_calls().items() if v > before.get(k, 0)}


def mutating(counts: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in counts.items() if k in MUTATING}
