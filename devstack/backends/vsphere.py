"""vSphere on vcsim (govmomi's simulator): vcsim alone, and the driver's settings for it.

Rules: every user starts its own vcsim (module or session scope); inventory seeding (node VMs,
zone tags) is :mod:`devstack.vcsim_inventory`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from cloudloop.cloud.vsphere.settings import VsphereSettings
from devstack.backends import emulator_only
from devstack.vcsim import VcsimEndpoint, VcsimOptions


@contextmanager
def vcsim_server(state_dir: Path, options: VcsimOptions | None = None) -> Iterator[VcsimEndpoint]:
    """vcsim alone (its default inventory unless ``options`` say otherwise)."""
    with emulator_only(state_dir, vcsim=options or VcsimOptions()) as local:
        assert local.vcsim is not None
        yield local.vcsim


def vsphere_settings(endpoint: VcsimEndpoint, **overrides: Any) -> VsphereSettings:
    """The driver's settings for vcsim (its CA and credentials); ``overrides`` set any other
    field (region and zones, timeouts, polling)."""
    values: dict[str, Any] = {
        "server": endpoint.server,
        "username": endpoint.username,
        "password": SecretStr(endpoint.password),
        "ca_bundle": endpoint.ca_file,
    }
    values.update(overrides)
    return VsphereSettings(**values)
