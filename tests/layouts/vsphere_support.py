"""What the vSphere layout tests share: the stack (Temporal and vcsim with Deckhouse's region and
zone tags, a guest agent reporting IPs), a config file from the example, vSphere's call counts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import REGISTRY

from cloudloop.cloud.vsphere.layout_resources import MUTATING
from devstack.backends.vsphere_layouts import layout_config, seed_layout_tags
from devstack.local import LocalStack, StackOptions
from devstack.vcsim import VcsimOptions
from devstack.vcsim_guest import GuestAgent


@contextmanager
def vsphere_stack(state_dir: Path) -> Iterator[LocalStack]:
    """Temporal and vcsim (two clusters, tagged as Deckhouse expects), no moto, no control
    plane; a guest agent gives powered-on cloud-init VMs an IP."""
    local = LocalStack(StackOptions(state_dir=state_dir, moto=False, kube=(), vcsim=VcsimOptions()))
    local.start()
    try:
        assert local.vcsim is not None
        seed_layout_tags(local.vcsim)
        with GuestAgent(local.vcsim):
            yield local
    finally:
        local.stop()


config_file = layout_config


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
