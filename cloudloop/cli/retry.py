"""``cloudloop retry``: retry a cloud operation that failed for good.

Rules: a machine's retry is a signal to its open run, else the annotation the starter acts on;
every other kind is its last run started again as it was (:mod:`starters.rerun`), on this
cluster's own queues only. A refusal or an unreachable Temporal is an error line, exit 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import click

from cloudloop.cli.root import leave, require_codec
from cloudloop.cloud.registry import Settings


@click.group()
def retry() -> None:
    """Retry a failed cloud operation."""


@retry.command("machine")
@click.argument("target", metavar="NAMESPACE/NAME")
def retry_machine(target: str) -> None:
    """Retry the failed provisioning of a Cluster API machine (DeckhouseMachine, ZvirtMachine).

    Signals the machine's workflow; when no run is open, sets the ``cloudloop.io/retry``
    annotation so the starter starts a new one (the same as setting it yourself).
    """
    from starters.machine import request_retry

    namespace, _, name = target.partition("/")
    if not namespace or not name:
        raise click.BadParameter("expected NAMESPACE/NAME", param_hint="TARGET")
    require_codec(Settings())
    try:
        click.echo(asyncio.run(request_retry(Settings(), namespace, name)))
    except LookupError as exc:
        raise click.ClickException(str(exc)) from None


def _rerun(find: Callable[[Any, Settings], Awaitable[str]]) -> None:
    """Start again the workflow ``find(client, settings)`` names; its outcome, then exit."""
    from cloudloop.claim import ClaimRefused
    from cloudloop.temporal import connect
    from starters.rerun import RetryRefused, rerun

    settings = Settings()
    require_codec(settings)

    async def go() -> str:
        client = await connect(settings.temporal)
        return str(await rerun(client, settings, await find(client, settings)))

    try:
        click.echo(asyncio.run(go()))
    except (RetryRefused, ClaimRefused) as exc:
        click.echo(f"Error: {exc}", err=True)
        leave(1)
    except Exception as exc:  # Temporal unreachable or refusing
        click.echo(f"Error: Temporal at {settings.temporal.address}: {exc}", err=True)
        leave(1)
    leave(0)


@retry.command("workflow")
@click.argument("workflow_id")
def retry_workflow(workflow_id: str) -> None:
    """Start a workflow that failed, timed out, was terminated or cancelled again, with the
    input, queue, timeouts, memo and search attributes of its last run (any kind; the
    Temporal UI shows the ID)."""

    async def find(client: Any, settings: Settings) -> str:
        return workflow_id

    _rerun(find)


@retry.command("layout")
@click.argument("prefix")
def retry_layout(prefix: str) -> None:
    """Start PREFIX's failed layout action (plan, apply, adopt, destroy) again as it was."""
    from starters.rerun import layout_id

    async def find(client: Any, settings: Settings) -> str:
        return layout_id(settings, prefix)

    _rerun(find)


@retry.command("drain")
@click.argument("node")
def retry_drain(node: str) -> None:
    """Start NODE's newest drain that did not complete (a PodDisruptionBudget that held past
    the drain's deadline, say) again as it was."""
    from starters.rerun import drain_id

    async def find(client: Any, settings: Settings) -> str:
        return await drain_id(client, settings, node)

    _rerun(find)


@retry.command("volume")
@click.argument("volume_id")
def retry_volume(volume_id: str) -> None:
    """Start the last operation on VOLUME_ID (delete, attach, detach, expand) again when its
    run failed; an operation that answered with an error code is retried by the CSI sidecars."""
    from starters.rerun import volume_id as volume_workflow

    async def find(client: Any, settings: Settings) -> str:
        return volume_workflow(settings, volume_id)

    _rerun(find)
