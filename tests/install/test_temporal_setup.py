"""``cloudloop temporal setup`` against a bare Temporal dev server (started without the attributes).

Before it, a start with the ``Cloudloop*`` search attributes is refused and the client logs one
error naming the command (however many starts fail); after it, the attributes are Keywords, a
second run changes nothing, and the same start succeeds.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError

from cloudloop import searchattrs, temporal
from cloudloop.settings import TemporalSettings
from devstack.local import LocalStack, StackOptions

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def bare_temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    stack = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("bare-temporal"),
            kube=(),
            moto=False,
            temporal_search_attributes=False,
        )
    )
    stack.start()
    try:
        yield stack.temporal_address
    finally:
        stack.stop()


def setup_command(address: str) -> subprocess.CompletedProcess[str]:
    cloudloop = Path(sys.executable).parent / "cloudloop"
    env = {**os.environ, "CLOUDLOOP_TEMPORAL__ADDRESS": address}
    return subprocess.run(
        [str(cloudloop), "temporal", "setup", "--wait", "30s"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def start_probe_like(client: Client) -> None:
    await client.start_workflow(
        "NoSuchWorkflow",
        id=f"install-{uuid.uuid4().hex[:8]}",
        task_queue=f"install-{uuid.uuid4().hex[:8]}",
        search_attributes=searchattrs.for_object(
            cluster="c", provider="p", kind="Service", namespace="ns", name="web"
        ),
    )


async def custom_attributes(client: Client) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    return dict(listed.custom_attributes)


async def test_a_start_without_the_attributes_names_the_setup_command_once(
    bare_temporal: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = await temporal.connect(
        TemporalSettings(address=bare_temporal), lazy=True, payloads=False
    )

    with caplog.at_level(logging.ERROR, logger="cloudloop.temporal"):
        for _ in range(3):
            with pytest.raises(RPCError) as refused:
                await start_probe_like(client)

    assert temporal.missing_search_attribute(refused.value) in searchattrs.KEYWORDS
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "cloudloop temporal setup" in errors[0]


async def test_setup_registers_the_attributes_once_and_starts_then_succeed(
    bare_temporal: str,
) -> None:
    first = setup_command(bare_temporal)
    second = setup_command(bare_temporal)
    client = await temporal.connect(TemporalSettings(address=bare_temporal), payloads=False)

    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"search attributes added: {', '.join(searchattrs.KEYWORDS)}"
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "search attributes: up to date"
    keyword = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    assert {k: v for k, v in (await custom_attributes(client)).items()} == dict.fromkeys(
        searchattrs.KEYWORDS, keyword
    )
    await start_probe_like(client)


def test_setup_fails_clearly_when_temporal_does_not_answer() -> None:
    from devstack.process import free_port

    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "cloudloop"),
            "temporal",
            "setup",
            "--wait",
            "1s",
        ],
        env={**os.environ, "CLOUDLOOP_TEMPORAL__ADDRESS": f"127.0.0.1:{free_port()}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 1
    assert "Temporal did not answer" in result.stderr
