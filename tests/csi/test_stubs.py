"""The committed gRPC stubs are what the spec's ``csi.proto`` compiles to today."""

from __future__ import annotations

import shutil

import pytest

from cloudloop.csi.v1 import csi_pb2
from devstack import csi_stubs


@pytest.mark.skipif(shutil.which("go") is None, reason="Go fetches csi.proto from its module")
def test_committed_stubs_match_the_spec() -> None:
    assert csi_stubs.stale() == [], "run: python -m devstack.csi_stubs"


def test_stubs_are_csi_v1() -> None:
    assert csi_pb2.DESCRIPTOR.package == "csi.v1"
    assert {"Identity", "Controller", "Node"} <= set(csi_pb2.DESCRIPTOR.services_by_name)
