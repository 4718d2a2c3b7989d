"""``cloudloop retry``: retry a cloud operation that failed for good.

Rules: a signal to the open run when there is one, else the annotation the starter acts on.
"""

from __future__ import annotations

import asyncio

import click

from cloudloop.cli.root import require_codec
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
