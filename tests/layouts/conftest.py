"""The layout tests' stack: Temporal and moto behind the AWS front, no control plane, one for the
whole folder (started by the first stack test that asks for it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.local import LocalStack, StackOptions


@pytest.fixture(scope="package")
def aws_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(StackOptions(state_dir=tmp_path_factory.mktemp("layouts"), kube=()))
    local.start()
    try:
        yield local
    finally:
        local.stop()
