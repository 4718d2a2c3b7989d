"""What the layout stack tests share: the layout worker in the test's process, a config file from
an example, the AWS front's counts, a history's payloads as one text, a plan's action counts."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from temporalio.client import Client
from temporalio.worker import Worker

from activities.layout import LayoutActivities
from cloudloop import temporal
from cloudloop.cloud.registry import Settings
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource, LayoutDef, ResourceDef
from cloudloop.messages.layout import LayoutInput, LayoutResult, LayoutTimings
from cloudloop.settings import LayoutSettings
from devstack.backends.aws_layouts import layout_config
from devstack.local import LocalStack
from starters.layout import run_layout
from tests.support.workers import CLI
from workflows.layout import LAYOUT_WORKFLOWS

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
#: The configs' AWS secret key (moto takes any): it must never reach a history or a log.
SECRET = "layout-s3cr3t-value"
#: Calls that change nothing in the cloud.
READ_ONLY = ("Describe", "Get", "List")


#: The tests write their configs into pytest's temporary folders: their workers' mount
#: (``layouts.source_dir``) is the temporary root.
TEST_MOUNT = Path(tempfile.gettempdir())


def mounted(settings: Settings, source_dir: Path = TEST_MOUNT) -> Settings:
    """``settings`` whose layout activities read files under ``source_dir``."""
    return settings.model_copy(update={"layouts": LayoutSettings(source_dir=source_dir)})


def layout_worker(
    client: Client, settings: Settings, queue: str = "", source_dir: Path = TEST_MOUNT
) -> Worker:
    """The layout workflows and ``settings``' activities on ``queue`` (the settings' own by
    default), reading configs under ``source_dir``, in this process, stopped in a second
    (``async with``)."""
    return temporal.make_worker(
        client,
        queue or settings.temporal.task_queue,
        workflows=LAYOUT_WORKFLOWS,
        activities=LayoutActivities(mounted(settings, source_dir)).all(),  # type: ignore[arg-type]
        graceful_shutdown_s=1,
    )


def layout_input(
    provider: str,
    action: str,
    path: Path,
    prefix: str,
    cluster_uuid: str,
    cloud_config: dict[str, str] | None = None,
) -> LayoutInput:
    """The input ``cloudloop layout <action>`` would start for ``provider``'s config at ``path``
    (``cloud_config``: its ``--cloud-config`` selection), three attempts a step."""
    return LayoutInput(
        action=action,
        provider=provider,
        source=ConfigSource(file=str(path), cloud_config=cloud_config or {}),
        cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
        timings=LayoutTimings(max_attempts=3),
    )


async def run(
    client: Client,
    settings: Settings,
    action: str,
    path: Path,
    prefix: str,
    cluster_uuid: str,
    cloud_config: dict[str, str] | None = None,
    *,
    provider: str,
) -> LayoutResult:
    """The action as ``cloudloop layout`` runs it (start or join, follow, result)."""
    input = layout_input(provider, action, path, prefix, cluster_uuid, cloud_config)
    return await run_layout(client, settings.temporal.task_queue, input, poll_s=0.2)


class Front:
    """The AWS front's request counts (``service:Action``)."""

    def __init__(self, endpoint: str) -> None:
        self.url = f"{endpoint}/_cloudloop/aws/stats"

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.url, method="DELETE"), timeout=5)

    def requests(self) -> dict[str, int]:
        with urllib.request.urlopen(self.url, timeout=5) as answer:
            counts: dict[str, int] = json.load(answer)["requests"]
        return counts

    def mutating(self) -> dict[str, int]:
        return {
            k: v for k, v in self.requests().items() if not k.split(":", 1)[1].startswith(READ_ONLY)
        }


def config_file(folder: Path, example: str, prefix: str) -> Path:
    """The example with ``prefix`` and moto's credentials, written into ``folder``."""
    return layout_config(EXAMPLES / f"{example}.yaml", folder, prefix, secret=SECRET)


def payloads(value: Any) -> str:
    """Every payload of a history (JSON, base64 ``data``) decoded, one text."""
    if isinstance(value, dict):
        own = (
            [base64.b64decode(value["data"]).decode(errors="replace")]
            if isinstance(value.get("data"), str) and "metadata" in value
            else []
        )
        return "\n".join(own + [payloads(v) for v in value.values()])
    if isinstance(value, list):
        return "\n".join(payloads(v) for v in value)
    return ""


def counts(result: LayoutResult) -> dict[str, int]:
    out: dict[str, int] = {}
    for module in result.plan or []:
        for resource in module.resources:
            out[resource.action] = out.get(resource.action, 0) + 1
    return out


class TerraformStates:
    """A test's upstream cluster as Terraform records it: each resource made is recorded in a v4
    state (one per module, as dhctl keeps them); subclasses make the resources with their cloud's
    raw SDK and name the Terraform provider."""

    provider: ClassVar[str]
    schema_version: ClassVar[int] = 0
    serial: ClassVar[int] = 3

    def __init__(self, layout: LayoutDef) -> None:
        self.layout = layout
        self.ids: dict[str, str] = {}
        self.states: dict[str, list[dict[str, Any]]] = {}

    def record(self, module: str, tf_type: str, tf_name: str, **attributes: Any) -> None:
        self.states.setdefault(module, []).append(
            {
                "mode": "managed",
                "type": tf_type,
                "name": tf_name,
                "provider": self.provider,
                "instances": [{"schema_version": self.schema_version, "attributes": attributes}],
            }
        )

    def state(self, module: str) -> str:
        return json.dumps(
            {
                "version": 4,
                "terraform_version": "0.14.8",
                "serial": self.serial,
                "lineage": str(uuid.uuid4()),
                "outputs": {},
                "resources": self.states[module],
            }
        )

    def resources(self) -> list[tuple[str, ResourceDef]]:
        return [(m.id, r) for m in self.layout.modules for r in m.resources]


async def cli(
    stack: LocalStack,
    queue: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 240,
) -> tuple[int, str]:
    """``cloudloop layout ARGS`` on ``queue`` of ``stack``'s Temporal, with the stack's codec
    key (as the workers') and ``env`` over this process's environment: (exit code, output)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        CLI,
        "layout",
        *args,
        "--temporal-address",
        stack.temporal_address,
        "--task-queue",
        queue,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **stack.codec_env(), **(env or {})},
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    return int(process.returncode or 0), out.decode()
