"""``cloudloop layout converge install|run|status`` and ``cloudloop layout approve``: the
in-cluster converge, a Temporal Schedule per cluster, and the approval of what it holds.

Rules: ``install`` builds its request as the other layout commands do (read once); the
Schedule runs only on a queue no other cluster claims; an approval given twice acts once.
This module is a process root: it may import ``starters``.
"""

from __future__ import annotations

from typing import Any

import click

from cloudloop.cli.layout_request import (
    bootstrap_option,
    config_source,
    layout_options,
    load_request,
    temporal_call,
    temporal_options,
    temporal_settings,
)
from cloudloop.cli.root import leave


@click.group("converge")
def converge() -> None:
    """The in-cluster converge (terraform-manager's job): a Temporal Schedule per cluster whose
    pass plans the layout every interval, reports each module's status (the status ConfigMap,
    exported by the starter as ``candi_converge_*`` metrics), applies what is safe with
    ``--auto``, and holds every destructive step until ``cloudloop layout approve``."""


@converge.command("install")
@layout_options
@bootstrap_option
@click.option(
    "--interval",
    "interval_s",
    type=click.FloatRange(min=60),
    help="Seconds between passes [layouts.converge.interval_s: 3600, upstream's period].",
)
@click.option(
    "--auto/--no-auto",
    default=None,
    help="Apply creations and in-place repairs; hold destructive steps [layouts.converge.auto].",
)
@click.option(
    "--approval-wait",
    "approval_wait_s",
    type=click.FloatRange(min=1),
    help="Seconds a pass waits for an approval [layouts.converge.approval_wait_s].",
)
@click.option(
    "--bootstrap-from-cluster/--no-bootstrap-from-cluster",
    default=True,
    help="Read each node group's bootstrap data where dhctl's converge does "
    "(d8-cloud-instance-manager/manual-bootstrap-for-<group>) [on].",
)
def layout_converge_install(
    interval_s: float | None,
    auto: bool | None,
    approval_wait_s: float | None,
    bootstrap_from_cluster: bool,
    **flags: Any,
) -> None:
    """Make (or update) the cluster's converge Schedule."""
    from cloudloop import claim
    from cloudloop.messages.layout_converge import ConvergeInput, schedule_id
    from starters.layout_converge import install_schedule

    loaded = load_request(flags).loaded
    settings, temporal = temporal_settings(flags)
    defaults = settings.layouts.converge
    input = ConvergeInput(
        provider=loaded.provider,
        source=config_source(flags),
        cluster=loaded.cluster,
        id_scope=temporal.id_scope,
        auto=defaults.auto if auto is None else auto,
        approval_wait_s=approval_wait_s or defaults.approval_wait_s,
        bootstrap_from_cluster=bootstrap_from_cluster,
    )
    interval = interval_s or defaults.interval_s

    async def call(client: Any, temporal: Any) -> str:
        mine = claim.ClusterIdentity.named_by(settings)
        await claim.refuse_if_claimed_elsewhere(client, [temporal.task_queue], mine)
        return await install_schedule(client, temporal.task_queue, input, interval)

    try:
        done = temporal_call(flags, call)
    except claim.ClaimRefused as exc:
        click.echo(f"Error: {exc}", err=True)
        leave(1)
    sid = schedule_id(loaded.cluster.prefix, temporal.id_scope)
    mode = "auto" if input.auto else "plan only"
    click.echo(f"Schedule {sid} {done}: a pass every {interval:.0f} s ({mode}).")
    leave(0)


@converge.command("run")
@click.argument("prefix")
@temporal_options
def layout_converge_run(prefix: str, **flags: Any) -> None:
    """Start a pass of PREFIX's converge now (none when one is running)."""
    from starters.layout_converge import trigger

    async def call(client: Any, temporal: Any) -> None:
        await trigger(client, prefix, temporal.id_scope)

    temporal_call(flags, call)
    click.echo(f"converge of {prefix}: a pass was asked for")
    leave(0)


def _print_state(state: Any) -> None:
    click.echo(f"phase: {state.phase}")
    for status in state.statuses:
        counts = f"+{status.to_create} ~{status.to_change} ±{status.to_replace}"
        note = f" ({status.note})" if status.note else ""
        click.echo(f"  {status.module}: {status.status} {counts}{note}")
    for step in state.held:
        click.echo(
            f"  held {step.key}: {step.outcome}" + (f" ({step.error})" if step.error else "")
        )
        for change in step.changes:
            click.echo(f"    {change.field}: {change.have!r} -> {change.want!r}")
    if state.error:
        click.echo(f"  error: {state.error}")


@converge.command("status")
@click.argument("prefix")
@temporal_options
def layout_converge_status(prefix: str, **flags: Any) -> None:
    """Show the running pass of PREFIX's converge: its statuses and the steps it holds."""
    from starters.layout_converge import pass_state, running_pass

    async def call(client: Any, temporal: Any) -> Any:
        handle = await running_pass(client, prefix, temporal.id_scope)
        return None if handle is None else await pass_state(handle)

    state = temporal_call(flags, call)
    if state is None:
        click.echo(f"converge of {prefix}: no pass is running")
    else:
        _print_state(state)
    leave(0)


@click.command("approve")
@click.argument("prefix")
@click.option("--step", default="", help="The held step's key (shown by status) [every one].")
@temporal_options
def approve(prefix: str, step: str, **flags: Any) -> None:
    """Approve the destructive steps PREFIX's running converge pass holds (an approval given
    twice acts once)."""
    from temporalio.client import WorkflowUpdateFailedError

    from starters.layout_converge import approve as approve_held
    from starters.layout_converge import running_pass

    async def call(client: Any, temporal: Any) -> Any:
        handle = await running_pass(client, prefix, temporal.id_scope)
        if handle is None:
            return None
        return await approve_held(handle, step)

    try:
        result = temporal_call(flags, call)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        click.echo(f"Error: approve refused: {getattr(cause, 'message', cause)}", err=True)
        leave(1)
    if result is None:
        click.echo(f"Error: no converge pass of {prefix} is running", err=True)
        leave(1)
    for key in result.approved:
        click.echo(f"approved: {key}")
    for key in result.already:
        click.echo(f"already approved: {key}")
    leave(0)
