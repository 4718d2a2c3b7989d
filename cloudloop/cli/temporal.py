"""``cloudloop temporal setup|claims|release-claim``: the Temporal namespace cloudloop runs in
and the claims that keep one cluster's queues its own.

Rules: the claim commands connect without the payload codec (they read no payload, so they
need no key); each one-shot command leaves without finalizing the SDK.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from cloudloop.cli.root import Duration, leave
from cloudloop.cloud.registry import Settings


@click.group()
def temporal() -> None:
    """Prepare the Temporal namespace cloudloop runs in."""


@temporal.command("setup")
@click.option(
    "--wait",
    type=Duration(),
    default="120s",
    show_default=True,
    help="How long to wait for Temporal to answer.",
)
def temporal_setup(wait: float) -> None:
    """Register the namespace's search attributes (idempotent; the chart runs it as a hook Job).

    Uses the operator service of the ``CLOUDLOOP_TEMPORAL__*`` frontend; attributes already
    registered with the right type are left alone, one registered with another type fails.
    """
    from cloudloop.temporal import SearchAttributeConflict, setup_namespace

    code = 0
    try:
        added = asyncio.run(setup_namespace(Settings().temporal, wait_s=wait))
        click.echo(
            f"search attributes added: {', '.join(added)}"
            if added
            else "search attributes: up to date"
        )
    except SearchAttributeConflict as exc:
        click.echo(f"Error: {exc}", err=True)
        code = 1
    except (ConnectionError, TimeoutError) as exc:
        click.echo(f"Error: Temporal did not answer: {exc}", err=True)
        code = 1
    # The SDK's core threads may still call into Python while the interpreter finalizes (an
    # abort at exit, seen here); this one-shot command is done, so leave without finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@temporal.command("claims")
@click.option("--task-queue", help="The general queue of the set [temporal.task_queue].")
def temporal_claims(task_queue: str | None) -> None:
    """Show which cluster holds each queue of the set (its clusterName and kube-system UID)."""
    from cloudloop.claim import read_claim

    queues = _claim_queues(task_queue)

    async def run() -> list[str]:
        from cloudloop.temporal import connect

        client = await connect(Settings().temporal, payloads=False)  # no payload: no key
        lines = []
        for queue in queues:
            claim = await read_claim(client, queue)
            lines.append(f"{queue}: " + (f"cluster {claim.holder}" if claim else "not claimed"))
        return lines

    _claim_command(run)


@temporal.command("release-claim")
@click.option("--task-queue", help="The general queue of the set [temporal.task_queue].")
@click.option("--reason", default="", help="Why (kept in the claim's history).")
def temporal_release_claim(task_queue: str | None, reason: str) -> None:
    """Release a cluster's claim of a queue set, so another cluster may serve it.

    Stop the old cluster's workers and starters first: a running one claims its queues again
    within a minute (and the other cluster is then refused).
    """
    from cloudloop.claim import release_claim

    queues = _claim_queues(task_queue)

    async def run() -> list[str]:
        from cloudloop.temporal import connect

        client = await connect(Settings().temporal, payloads=False)  # no payload: no key
        lines = []
        for queue in queues:
            claim = await release_claim(
                client,
                queue,
                by=f"{os.environ.get('USER', '')}@{os.uname().nodename}",
                reason=reason,
            )
            lines.append(
                f"{queue}: released the claim of cluster {claim.holder}"
                if claim
                else f"{queue}: not claimed"
            )
        return lines

    _claim_command(run)


def _claim_queues(task_queue: str | None) -> list[str]:
    temporal_settings = Settings().temporal
    if task_queue:
        temporal_settings = temporal_settings.model_copy(update={"task_queue": task_queue})
    return temporal_settings.all_queues()


def _claim_command(run: Callable[[], Any]) -> None:
    code = 0
    try:
        for line in asyncio.run(run()):
            click.echo(line)
    except Exception as exc:  # Temporal unreachable or refusing
        click.echo(f"Error: {exc}", err=True)
        code = 1
    leave(code)
