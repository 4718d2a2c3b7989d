"""What the layout stack tests share: the layout worker in the test's process, a config file from
an example, the AWS front's counts, a history's payloads as one text, a plan's action counts."""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client
from temporalio.worker import Worker

from activities.layout import LayoutActivities
from cloudloop import temporal
from cloudloop.cloud.registry import Settings
from cloudloop.messages.layout import LayoutResult
from workflows.layout import LAYOUT_WORKFLOWS

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
#: The configs' AWS secret key (moto takes any): it must never reach a history or a log.
SECRET = "layout-s3cr3t-value"
#: Calls that change nothing in the cloud.
READ_ONLY = ("Describe", "Get", "List")


def layout_worker(client: Client, settings: Settings, queue: str = "") -> Worker:
    """The layout workflows and ``settings``' activities on ``queue`` (the settings' own by
    default), in this process, stopped in a second (``async with``)."""
    return temporal.make_worker(
        client,
        queue or settings.temporal.task_queue,
        workflows=LAYOUT_WORKFLOWS,
        activities=LayoutActivities(settings).all(),  # type: ignore[arg-type]
        graceful_shutdown_s=1,
    )


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
    docs = list(yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
        else:
            doc["provider"].update(providerAccessKeyId="testing", providerSecretAccessKey=SECRET)
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


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
