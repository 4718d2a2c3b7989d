"""A vcsim of its own for a test module: import the fixtures into the module that needs them.

``vcsim`` starts govmomi's simulator alone (no Temporal, no control plane); ``seeded`` adds two
node VMs in two tagged zones. Modules using them are stack tests (mark them ``stack``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.backends.vsphere import vcsim_server
from devstack.vcsim import VcsimEndpoint
from devstack.vcsim_inventory import Inventory, NodeVm, ZoneLayout, seed

NODES = (
    NodeVm("node-a", "10.0.1.10", cluster="DC0_C0"),
    NodeVm("node-b", "10.0.2.10", cluster="DC0_C1"),
)


@pytest.fixture(scope="module")
def vcsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VcsimEndpoint]:
    with vcsim_server(tmp_path_factory.mktemp("vcsim")) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def seeded(vcsim: VcsimEndpoint) -> Inventory:
    return seed(vcsim, NODES, ZoneLayout())
