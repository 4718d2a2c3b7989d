"""``cloudloop layout plan|apply|adopt|destroy``: a layout's action as a durable workflow,
followed here until it ends; ``converge`` and ``approve`` come from :mod:`.layout_converge`.

Rules: the request is built once (:func:`~cloudloop.cli.layout_request.load_request`); the
action runs only on a queue no other cluster claims; a failed action exits 1 with its error.
This module is a process root: it may import ``starters``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from cloudloop.cli import layout_converge
from cloudloop.cli.layout_request import (
    LayoutRequest,
    bootstrap_option,
    config_source,
    layout_options,
    load_request,
    temporal_settings,
)
from cloudloop.cli.root import leave


@click.group()
def layout() -> None:
    """Layouts: base infrastructure, master and static nodes as durable workflows (plan, apply,
    destroy, and adopt of what the upstream Terraform state lists).

    ``--config`` is the cluster's YAML: its ``<Provider>ClusterConfiguration`` (with the
    credentials) and optionally its ``ClusterConfiguration`` (``cloud.prefix``,
    ``podSubnetCIDR``). The document is validated here, every error at once, before anything
    else happens; the workers read the file themselves (only its path goes to Temporal): at the
    same path, or at ``--worker-config-path`` (e.g. a Secret mounted into the worker).
    """


def _layout_run(
    action: str,
    request: LayoutRequest,
    flags: dict[str, Any],
    *,
    plan_destroy: bool = False,
    state_sources: list[str] | None = None,
    kubeconfig: Path | None = None,
) -> Any:
    """Start the action, follow it; the result (or a clean error exit)."""
    from cloudloop import claim
    from cloudloop.cloud.layouts import AdoptingPart
    from cloudloop.messages.layout import LayoutInput
    from starters.layout import LayoutFailed, run_layout

    loaded, part = request.loaded, request.part
    state = []
    if state_sources is not None:
        from starters.layout import StateUnreadable, state_records

        if not isinstance(part, AdoptingPart):
            raise click.ClickException(f"{loaded.provider} layouts cannot adopt a Terraform state")
        kube = None
        if kubeconfig is not None:
            from cloudloop.kube.api import Kube
            from cloudloop.kube.client import api_client

            kube = Kube(api_client(kubeconfig))
        try:
            state = state_records(state_sources, part.state_types, kube)
        except StateUnreadable as exc:
            raise click.ClickException(str(exc)) from None
    settings, temporal = temporal_settings(flags)
    input = LayoutInput(
        action=action,
        provider=loaded.provider,
        source=config_source(flags),
        cluster=loaded.cluster,
        plan_destroy=plan_destroy,
        state=state,
        kubeconfig=(
            (flags.get("worker_kubeconfig_path") or str(kubeconfig.resolve()))
            if action == "destroy" and kubeconfig is not None
            else ""
        ),
        id_scope=temporal.id_scope,
    )

    async def go() -> Any:
        from cloudloop.temporal import connect

        client = await connect(temporal)
        # The layout runs on this cluster's queue with its workers' cloud credentials: never on
        # a queue another cluster serves (checked before anything is started).
        mine = claim.ClusterIdentity.named_by(settings)
        await claim.refuse_if_claimed_elsewhere(client, [temporal.task_queue], mine)
        return await run_layout(client, temporal.task_queue, input, report=click.echo)

    try:
        return asyncio.run(go())
    except claim.ClaimRefused as exc:
        click.echo(f"Error: {exc}", err=True)
        leave(1)
    except LayoutFailed as exc:
        click.echo(f"Error: {action} failed: {exc}", err=True)
        leave(1)
    except (ConnectionError, RuntimeError) as exc:
        click.echo(f"Error: Temporal at {temporal.address}: {exc}", err=True)
        leave(1)


@layout.command("plan")
@layout_options
@bootstrap_option
@click.option("--destroy", "plan_destroy", is_flag=True, help="Plan the destroy instead.")
def layout_plan(plan_destroy: bool, **flags: Any) -> None:
    """Show what apply would create, change (drift included) or leave — or, with
    ``--destroy``, what destroy would delete; changes nothing."""
    result = _layout_run("plan", load_request(flags), flags, plan_destroy=plan_destroy)
    counts = {"create": 0, "update": 0, "delete": 0, "no-op": 0}
    for module in result.plan:
        for resource in module.resources:
            counts[resource.action] += 1
            if resource.action == "no-op":
                continue
            sign = {"create": "+", "update": "~", "delete": "-"}[resource.action]
            click.echo(f"{sign} {resource.key} ({module.module})")
            for change in resource.changes:
                click.echo(f"    {change.field}: {change.have!r} -> {change.want!r}")
    click.echo(
        f"Plan: {counts['create']} to create, {counts['update']} to change, "
        f"{counts['delete']} to destroy, {counts['no-op']} unchanged."
    )
    leave(0)


@layout.command("apply")
@layout_options
@bootstrap_option
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the results into this cluster's Secrets.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the outputs (discovery data, nodes) here as JSON.",
)
def layout_apply(kubeconfig: Path | None, output: Path | None, **flags: Any) -> None:
    """Create what is missing and repair drift, following each resource's step."""
    request = load_request(flags)
    result = _layout_run("apply", request, flags)
    outputs = {
        "cloud_discovery_data": result.cloud_discovery_data,
        **result.outputs,
        "nodes": {m.node_name: m.outputs for m in result.modules if m.node_name},
    }
    text = json.dumps(outputs, indent=2, sort_keys=True)
    click.echo(text)
    if output is not None:
        output.write_text(text + "\n")
    if kubeconfig is not None:
        _publish(request, result, kubeconfig)
    leave(0)


def _publish(request: LayoutRequest, result: Any, kubeconfig: Path) -> None:
    """Write an apply's results into the cluster's Secrets (exit 1 when that fails)."""
    from cloudloop.cloud.layouts import AdoptingPart
    from cloudloop.kube.api import Kube, KubeError
    from cloudloop.kube.client import api_client
    from starters.layout import publish

    part = request.part
    try:
        written = publish(
            Kube(api_client(kubeconfig)),
            result,
            state_types=part.state_types if isinstance(part, AdoptingPart) else None,
            provider_document=request.provider_document,
            cluster_uuid=request.loaded.cluster.uuid,
        )
        for name in written:
            kind = "ConfigMap" if name == "kube-system/d8-cluster-uuid" else "Secret"
            click.echo(f"written: {kind} {name}")
    except (KubeError, OSError) as exc:
        click.echo(f"Error: writing the results into the cluster: {exc}", err=True)
        leave(1)


@layout.command("adopt")
@layout_options
@bootstrap_option
@click.option(
    "--state",
    "states",
    multiple=True,
    required=True,
    help="The upstream Terraform state: PATH (the cluster's), NODE=PATH (a node's), *=PATH "
    "(any module), secret:NS/NAME (a dhctl state Secret) or 'cluster' (every state Secret "
    "in d8-system); repeatable.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The cluster to read state Secrets from.",
)
def layout_adopt(states: tuple[str, ...], kubeconfig: Path | None, **flags: Any) -> None:
    """Take over what the upstream Terraform state lists, without recreating anything: each
    resource found by its ID and made findable (the next plan/apply finds it), drift shown;
    what the state lists but the cloud lacks, and what could not be placed, reported."""
    result = _layout_run(
        "adopt", load_request(flags), flags, state_sources=list(states), kubeconfig=kubeconfig
    )
    steps = [s for m in result.modules for s in m.steps]
    adopted = [s for s in steps if s.action == "adopted"]
    missing = [s.key for s in steps if s.action == "missing"]
    for step in adopted:
        for change in step.changes:
            click.echo(f"~ {step.key}: {change.field}: {change.have!r} -> {change.want!r}")
    for key in missing:
        click.echo(f"! {key}: listed in the state, not in the cloud (apply will create it)")
    for line in result.unmapped:
        click.echo(f"? {line}")
    drifted = sum(1 for s in adopted if s.changes)
    click.echo(
        f"Adopted {len(adopted)} resource(s) ({drifted} drifted), {len(missing)} missing, "
        f"{len(result.unmapped)} not placed."
    )
    leave(0)


@layout.command("destroy")
@layout_options
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The cluster's kubeconfig: first delete its LoadBalancer Services, PVCs and Cluster "
    "API MachineDeployments and wait until their cloud objects are gone (as dhctl destroy).",
)
@click.option(
    "--worker-kubeconfig-path",
    help="Where the workers read that kubeconfig (a mounted Secret) [its own path].",
)
def layout_destroy(kubeconfig: Path | None, **flags: Any) -> None:
    """Delete the layout's resources in reverse order. With ``--kubeconfig``, first the
    cluster's own cloud-backed objects through its API; without, refused while the cluster's
    own load balancers, volumes or other instances remain in its network (they are named)."""
    result = _layout_run("destroy", load_request(flags), flags, kubeconfig=kubeconfig)
    deleted = sum(1 for m in result.modules for s in m.steps if s.action == "deleted")
    click.echo(f"Destroy complete: {deleted} resource(s) deleted.")
    leave(0)


layout.add_command(layout_converge.converge)
layout.add_command(layout_converge.approve)
