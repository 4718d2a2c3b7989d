"""What the OpenStack layout stack tests share: a stack of Temporal and the OpenStack emulator (no
moto, no control plane), a config file from an example pointed at the emulator, the emulator's
request counts, and the worker's settings."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.cloud.registry import Settings
from cloudloop.settings import TemporalSettings
from devstack.backends.openstack import QUICK
from devstack.local import LocalStack, StackOptions
from devstack.openstack_emulator import (
    OpenStackEmulatorAdmin,
    OpenStackEmulatorEndpoint,
    OpenStackEmulatorOptions,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
#: The emulator's password (in the config files only): it must never reach a history or a log.
SECRET = "os-layout-s3cr3t-value"
#: The examples' prefix (node groups name the layout's network by it).
EXAMPLE_PREFIX = "demo-os"


@contextmanager
def openstack_layout_stack(state_dir: Path) -> Iterator[LocalStack]:
    """Temporal and the emulator (quick transitions), stopped when the block ends."""
    local = LocalStack(
        StackOptions(
            state_dir=state_dir,
            moto=False,
            kube=(),
            openstack_emulator=OpenStackEmulatorOptions(password=SECRET, delays=QUICK),
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def endpoint_of(stack: LocalStack) -> OpenStackEmulatorEndpoint:
    assert stack.openstack is not None
    return stack.openstack


def layout_settings(stack: LocalStack) -> Settings:
    """A worker's settings: Temporal on a queue of its own; OpenStack timeouts and polling (the
    login comes from the config file)."""
    return Settings(
        provider="openstack",
        temporal=TemporalSettings(
            address=stack.temporal_address,
            task_queue=f"os-layouts-{uuid.uuid4().hex[:8]}",
            codec=stack.codec,
        ),
        openstack=OpenStackSettings(request_timeout_s=10, wait_timeout_s=60, poll_interval_s=0.1),
    )


def config_file(
    folder: Path, example: str, prefix: str, endpoint: OpenStackEmulatorEndpoint, **section: Any
) -> Path:
    """The example with ``prefix``, the emulator's login and ``section`` laid over the layout's
    own section (``externalNetworkName="none"``), written into ``folder``."""
    docs = list(yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        doc["provider"] = {
            "authURL": endpoint.auth_url,
            "domainName": endpoint.user_domain,
            "tenantName": endpoint.project,
            "username": endpoint.username,
            "password": endpoint.password,
            "region": endpoint.region,
        }
        for group in doc.get("nodeGroups") or []:
            klass = group["instanceClass"]
            if klass.get("mainNetwork") == EXAMPLE_PREFIX:
                klass["mainNetwork"] = prefix
        name = {
            "Standard": "standard",
            "StandardWithNoRouter": "standardWithNoRouter",
            "Simple": "simple",
            "SimpleWithInternalNetwork": "simpleWithInternalNetwork",
        }[doc["layout"]]
        doc[name].update(section)
    path = folder / f"{example}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


class Requests:
    """The emulator's request counts (``"<METHOD> <service> <route>"``)."""

    def __init__(self, endpoint: OpenStackEmulatorEndpoint) -> None:
        self.admin = OpenStackEmulatorAdmin(endpoint.admin_url)

    def reset(self) -> None:
        self.admin.clear_requests()

    def counts(self) -> dict[str, int]:
        return self.admin.request_counts()

    def mutating(self) -> dict[str, int]:
        """Requests that may change the cloud (Keystone's logins do not)."""
        return {
            k: v
            for k, v in self.counts().items()
            if not k.startswith(("GET ", "HEAD ")) and k.split(" ")[1] != "identity"
        }
