"""The demos of ``cloudloop dev --provider <name>``: one module per cloud the dev stack emulates.

A demo adds its emulator to the stack options, seeds a cloud and a cluster (returning the settings
the worker and starter run with), names what to look at in the banner, and stops what it started
beside the stack (the AWS demo's CSI controller and sidecars).

Rules: one :class:`Demo` class per module, one line in :data:`DEMOS`; demos run only in devstack.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cloudloop.cloud.registry import Settings
    from cloudloop.kube.api import Kube
    from devstack.local import LocalStack, StackOptions


class Demo(Protocol):
    name: str

    def stack_options(self, options: StackOptions) -> StackOptions:
        """The stack options with this demo's emulators added."""
        ...

    def seed(self, stack: LocalStack, kube: Kube, settings: Settings) -> Settings:
        """Seed the cloud and the cluster; the settings the processes run with."""
        ...

    def stop(self) -> None:
        """Stop what the demo started beside the stack (before the stack stops)."""
        ...

    def layout_config(self, folder: Path, prefix: str) -> Path | None:
        """A layout of this cloud for the demo's converge pass, written into ``folder`` (with
        ``prefix``); ``None``: the demo runs none."""
        ...

    def endpoints(self, stack: LocalStack) -> list[str]:
        """Banner lines: where the emulated cloud answers."""
        ...

    def watch(self, stack: LocalStack, kubectl: Path) -> list[str]:
        """Banner lines: what to run to watch the demo."""
        ...


def _lazy(module: str, name: str) -> Callable[[], Demo]:
    """The demo class ``name`` of ``module``, imported when the demo is made: the ``cloudloop``
    command loads this plugin at every start, and the emulators' SDKs (openstacksdk, pyVmomi)
    cost seconds and tens of MB that a worker or starter process must not pay."""

    def make() -> Demo:
        demo: Demo = getattr(importlib.import_module(module), name)()
        return demo

    return make


DEMOS: dict[str, Callable[[], Demo]] = {
    "aws": _lazy("devstack.demos.aws", "AwsDemo"),
    "dvp": _lazy("devstack.demos.dvp", "DvpDemo"),
    "openstack": _lazy("devstack.demos.openstack", "OpenStackDemo"),
    "vsphere": _lazy("devstack.demos.vsphere", "VsphereDemo"),
    "zvirt": _lazy("devstack.demos.zvirt", "ZvirtDemo"),
}
