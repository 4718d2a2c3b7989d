"""Against the stack: the layout worker (its ``layouts.source_dir`` a folder of the test) and
the real CLI on the real Temporal and the AWS front (moto).
A layout input naming a file outside the mount (``/etc/passwd``, ``..``, a symlink leading out)
is refused with nothing read: the file's access time is untouched, no cloud request is made,
the failure (``LayoutConfigRefused``, non-retryable, one attempt) names the requested file only,
and neither the history nor the CLI's output holds anything of the file. The
same worker plans from a file inside the mount (by absolute or relative name)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput, plan_workflow_id
from cloudloop.settings import TemporalSettings
from devstack.local import LocalStack
from starters.layout import LayoutFailed, run_layout
from tests.layouts.support import Front, cli, config_file, layout_worker, payloads

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

UUID = "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"
#: A secret in the file outside the mount: if it were read, it would be a valid config.
OUTSIDE_SECRET = "outside-mount-s3cr3t-7f3a"


def _age(path: Path) -> int:
    """Set ``path``'s access time a day before its change: any read now moves it (relatime)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_mtime_ns - 86_400 * 10**9, st.st_mtime_ns))
    return os.stat(path).st_atime_ns


async def test_a_path_outside_the_mount_is_refused_with_nothing_read(
    aws_stack: LocalStack, tmp_path: Path
) -> None:
    mount, outside = tmp_path / "mount", tmp_path / "outside"
    mount.mkdir()
    outside.mkdir()
    inside = config_file(mount, "aws-without-nat", "unused")  # mount/cluster.yaml, valid
    secret = outside / "secret.yaml"
    shutil.copy(inside, secret)
    secret.write_text(secret.read_text().replace("layout-s3cr3t-value", OUTSIDE_SECRET))
    (mount / "escape.yaml").symlink_to(secret)
    (mount / "up").symlink_to(outside)

    queue = f"mount-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        provider="aws",
        temporal=TemporalSettings(
            address=aws_stack.temporal_address, task_queue=queue, codec=aws_stack.codec
        ),
        aws=AwsSettings(endpoint_url=aws_stack.aws_endpoint, timeout_s=5, max_attempts=2),
    )
    front = Front(aws_stack.aws_endpoint)
    client: Client = await temporal.connect(settings.temporal)
    passwd_atime = os.stat("/etc/passwd").st_atime_ns
    refusals = {
        "etc-passwd": "/etc/passwd",
        "absolute-outside": str(secret),
        "dotdot": f"{mount}/../outside/secret.yaml",
        "relative-dotdot": "../outside/secret.yaml",
        "symlink-out": "escape.yaml",
        "symlinked-dir": "up/secret.yaml",
    }
    async with layout_worker(client, settings, queue, source_dir=mount):
        for case, name in refusals.items():
            before = _age(secret)
            front.reset()
            prefix = f"m{uuid.uuid4().hex[:6]}"
            if case == "etc-passwd":  # as a user sees it: the real CLI
                code, out = await cli(
                    aws_stack,
                    queue,
                    "plan",
                    "--config",
                    str(inside),
                    "--cluster-uuid",
                    UUID,
                    "--prefix",
                    prefix,
                    "--worker-config-path",
                    name,
                )
                assert code == 1, out
                assert "Error: plan failed: " in out and "root:" not in out, out
                message = out
            else:
                with pytest.raises(LayoutFailed) as failed_run:
                    await run_layout(
                        client,
                        queue,
                        LayoutInput(
                            action="plan",
                            provider="aws",
                            source=ConfigSource(file=name),
                            cluster=ClusterIdentity(prefix=prefix, uuid=UUID),
                        ),
                        poll_s=0.2,
                    )
                assert failed_run.value.kind == "LayoutConfigRefused", case
                message = str(failed_run.value)
            assert f"configuration {name}: outside layouts.source_dir; nothing read" in message
            assert OUTSIDE_SECRET not in message
            assert os.stat(secret).st_atime_ns == before, f"{case}: the file was read"
            assert front.requests() == {}, (case, front.requests())  # no cloud call either

            scope = queue if case == "etc-passwd" else ""  # the CLI scopes its IDs by its queue
            history = await client.get_workflow_handle(
                plan_workflow_id(prefix, scope)
            ).fetch_history()
            raw = history.to_json()
            text = payloads(json.loads(raw)) + raw
            assert OUTSIDE_SECRET not in text and "root:x:0:0" not in text, case
            assert str(mount) not in text.replace(name, ""), f"{case}: the mount was named"
            failed = [
                e for e in history.events if e.HasField("activity_task_failed_event_attributes")
            ]
            assert len(failed) == 1, f"{case}: retried ({len(failed)} attempts)"
            info = failed[0].activity_task_failed_event_attributes.failure.application_failure_info
            assert info.type == "LayoutConfigRefused" and info.non_retryable
        assert os.stat("/etc/passwd").st_atime_ns == passwd_atime

        # the same worker reads what is inside the mount, by a relative name (the CLI's) and
        # by its absolute path
        code, out = await cli(
            aws_stack,
            queue,
            "plan",
            "--config",
            str(inside),
            "--cluster-uuid",
            UUID,
            "--prefix",
            f"m{uuid.uuid4().hex[:6]}",
            "--worker-config-path",
            "cluster.yaml",
        )
        assert code == 0, out
        assert "Plan: " in out and " to create" in out, out
        result = await run_layout(
            client,
            queue,
            LayoutInput(
                action="plan",
                provider="aws",
                source=ConfigSource(file=str(inside)),
                cluster=ClusterIdentity(prefix=f"m{uuid.uuid4().hex[:6]}", uuid=UUID),
            ),
            poll_s=0.2,
        )
        assert result.plan and all(r.action == "create" for m in result.plan for r in m.resources)
