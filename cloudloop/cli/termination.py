"""``cloudloop termination install|uninstall``: the node termination handler's managed
interruption queue (AWS), made by a workflow on this cluster's queues.

Rules: refused when another cluster claims the queues; leaves without finalizing the SDK.
"""

from __future__ import annotations

import asyncio
import os
import sys

import click

from cloudloop.cli.root import require_codec
from cloudloop.cloud.registry import Settings


@click.group()
def termination() -> None:
    """The node termination handler's managed interruption queue (AWS)."""


def _queue_setup(remove: bool) -> None:
    from cloudloop import temporal as temporal_client
    from starters.termination import setup_queue

    require_codec(Settings())

    async def run() -> str:
        from cloudloop.claim import ClusterIdentity, refuse_if_claimed_elsewhere

        settings = Settings()
        client = await temporal_client.connect(settings.temporal)
        # The queue workflow runs on this cluster's queues: never on another cluster's.
        mine = ClusterIdentity.named_by(settings)
        await refuse_if_claimed_elsewhere(client, settings.temporal.all_queues(), mine)
        result = await setup_queue(client, settings, remove=remove)
        if remove:
            return "removed: " + (", ".join(result.removed) or "nothing (already gone)")
        return f"queue {result.queue_url}: rules {', '.join(result.rules)}; hooks {result.hooks}"

    code = 0
    try:
        click.echo(asyncio.run(run()))
    except Exception as exc:  # Temporal unreachable, the workflow failed
        click.echo(f"Error: {exc}", err=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as temporal setup: leave without finalizing the SDK's threads


@termination.command("install")
def termination_install() -> None:
    """Make the SQS queue, its policy, the EventBridge rules and the lifecycle hooks
    (idempotent; the starter does it too when ``nth.queue_url`` is empty)."""
    _queue_setup(remove=False)


@termination.command("uninstall")
def termination_uninstall() -> None:
    """Remove what ``install`` made (the chart's pre-delete hook Job runs it)."""
    _queue_setup(remove=True)
