"""The long-running processes: ``worker``, ``starter``, ``csi-controller``, ``csi-node``,
``termination-imds`` and ``codec-server``, and the flags they share.

Rules (the upstream cloud-controller-manager's conventions): ``--kubeconfig`` (in-cluster
config when unset); ``--cloud-config`` names a YAML file holding the configured provider's
settings section (its keys are the ``CLOUDLOOP_<PROVIDER>__*`` names, lower case; environment
values win over it), or the provider's upstream configuration file when the provider reads one
(its ``config_file`` setting); ``--leader-elect[=true|false]`` on the starter; ``--log-format
text|json``. A flag wins over the setting it overrides. This module is a process root: it may
import ``workers`` and ``starters``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError

from cloudloop.cli.root import (
    LOG_FORMATS,
    Duration,
    F,
    reconfigure_logging,
    refused_exits,
    require_codec,
)
from cloudloop.cloud.registry import Settings
from cloudloop.errortext import describe_validation
from cloudloop.settings import MAX_CONCURRENT_NODE_SYNCS


def process_options(command: F) -> F:
    """``--kubeconfig``, ``--cloud-config`` and ``--log-format`` of the long-running processes."""

    @click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Path of a kubeconfig; in-cluster config when unset.",
    )
    @click.option(
        "--cloud-config",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="YAML file with the provider's settings section.",
    )
    @click.option(
        "--log-format", "process_log_format", type=click.Choice(LOG_FORMATS), help="Log lines."
    )
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        kubeconfig: Path | None,
        cloud_config: Path | None,
        process_log_format: str | None,
        **kwargs: Any,
    ) -> Any:
        reconfigure_logging(process_log_format)
        settings = with_process_flags(Settings(), kubeconfig=kubeconfig, cloud_config=cloud_config)
        return command(*args, settings=settings, **kwargs)

    return wrapper  # type: ignore[return-value]


def with_process_flags(
    settings: Settings, *, kubeconfig: Path | None = None, cloud_config: Path | None = None
) -> Settings:
    """``settings`` with ``--kubeconfig`` and the ``--cloud-config`` file applied.

    The file fills the provider's section; a field the environment (or the ``CLOUDLOOP_CONFIG``
    file) set explicitly keeps its value.
    """
    update: dict[str, Any] = {}
    if kubeconfig is not None:
        update["kubeconfig"] = kubeconfig
    if cloud_config is not None:
        from cloudloop.cloud.registry import provider_for

        record = provider_for(settings)
        update[record.name] = _cloud_config_section(record, settings, cloud_config)
    return settings.model_copy(update=update) if update else settings


#: The settings field a provider reads its upstream configuration file from, if it has one.
UPSTREAM_CONFIG_FIELD = "config_file"


def _cloud_config_section(record: Any, settings: Settings, path: Path) -> Any:
    """The provider's section with the ``--cloud-config`` file applied.

    A YAML mapping of the section's own fields fills it. Anything else (upstream's own format,
    e.g. an INI ``vsphere.conf``) goes to the provider's ``config_file`` setting when it has one;
    otherwise it is refused. A field set explicitly by the environment keeps its value.
    """
    fields = set(record.settings.model_fields)
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        loaded = None
    current = record.section(settings)
    explicit = current.model_dump(include=current.model_fields_set)
    if not isinstance(loaded, dict) or not set(loaded) <= fields:
        if UPSTREAM_CONFIG_FIELD in fields:
            return current.model_copy(update={UPSTREAM_CONFIG_FIELD: path})
        unknown = sorted(set(loaded) - fields) if isinstance(loaded, dict) else []
        raise click.BadParameter(
            f"{path}: not a mapping of {record.name} settings"
            + (f" (unknown: {', '.join(unknown)})" if unknown else ""),
            param_hint="--cloud-config",
        )
    try:
        return record.settings.model_validate({**loaded, **explicit})
    except ValidationError as exc:  # the fields named, never their values (credentials)
        raise click.BadParameter(
            f"{path}: {describe_validation(exc)}", param_hint="--cloud-config"
        ) from None


@click.command()
@process_options
def worker(settings: Settings) -> None:
    """Run a Temporal worker (workflows + the configured cloud's activities)."""
    from cloudloop.heap import cap_malloc_arenas, pin_mmap_threshold
    from workers.main import run

    require_codec(settings)
    cap_malloc_arenas()
    pin_mmap_threshold()
    refused_exits(lambda: asyncio.run(run(settings)))


@click.command()
@click.option("--node-monitor-period", type=Duration(), help="Lifecycle pass period [5s].")
@click.option("--node-status-update-frequency", type=Duration(), help="Address refresh [5m].")
@click.option(
    "--concurrent-node-syncs",
    type=click.IntRange(1, MAX_CONCURRENT_NODE_SYNCS),
    help=f"Node initializations writing at once, 1-{MAX_CONCURRENT_NODE_SYNCS} [1].",
)
@click.option(
    "--concurrent-node-status-updates",
    type=click.IntRange(0, MAX_CONCURRENT_NODE_SYNCS),
    help="Parallel address patches [0: --concurrent-node-syncs].",
)
@click.option("--concurrent-service-syncs", type=int, help="Parallel load-balancer syncs [1].")
@click.option(
    "--configure-cloud-routes/--no-configure-cloud-routes",
    default=None,
    help="Reconcile pod-network routes (needs --cluster-cidr) [true].",
)
@click.option("--cluster-cidr", help="The pod network CIDR(s), comma-separated.")
@click.option("--route-reconciliation-period", type=Duration(), help="Route pass period [10s].")
@click.option(
    "--leader-elect",
    type=click.BOOL,
    is_flag=False,
    flag_value=True,
    default=None,
    help="Run only while holding the Lease [true]; --leader-elect=false runs at once.",
)
@process_options
def starter(settings: Settings, leader_elect: bool | None, **flags: Any) -> None:
    """Run the leader-elected watchers that start workflows.

    The flags carry the upstream cloud-controller-manager names and defaults; each also has a
    setting (``CLOUDLOOP_CCM__<NAME>``), which the flag overrides.
    """
    from cloudloop.heap import cap_malloc_arenas
    from starters.main import run

    require_codec(settings)
    cap_malloc_arenas()
    if leader_elect is not None:
        election = settings.leader_election.model_copy(update={"enabled": leader_elect})
        settings = settings.model_copy(update={"leader_election": election})
    refused_exits(lambda: asyncio.run(run(with_ccm_flags(settings, flags))))


def with_ccm_flags(settings: Settings, flags: dict[str, Any]) -> Settings:
    """Settings with the upstream-named flags that were given applied to ``settings.ccm``."""
    renames = {
        "node_monitor_period": "node_monitor_period_s",
        "node_status_update_frequency": "node_status_update_frequency_s",
        "route_reconciliation_period": "route_reconciliation_period_s",
    }
    update = {renames.get(k, k): v for k, v in flags.items() if v is not None}
    return settings.model_copy(update={"ccm": settings.ccm.model_copy(update=update)})


@click.command("csi-controller")
@click.option("--endpoint", help="CSI endpoint, unix:///path [csi.endpoint].")
@process_options
def csi_controller(settings: Settings, endpoint: str | None) -> None:
    """Serve the CSI Identity and Controller services (through the volume workflows)."""
    from cloudloop.csi.server import run_controller

    require_codec(settings)
    if endpoint:
        settings = settings.model_copy(
            update={"csi": settings.csi.model_copy(update={"endpoint": endpoint})}
        )
    asyncio.run(run_controller(settings))


@click.command("csi-node")
@click.option("--endpoint", help="CSI endpoint, unix:///path [csi.endpoint].")
@click.option("--node-name", help="This node's Kubernetes name [csi.node_name, NODE_NAME].")
@process_options
def csi_node(settings: Settings, endpoint: str | None, node_name: str | None) -> None:
    """Serve the CSI Identity and Node services (format, mount, expand on this node)."""
    from cloudloop.csi.server import run_node

    update = {k: v for k, v in (("endpoint", endpoint), ("node_name", node_name)) if v}
    settings = settings.model_copy(update={"csi": settings.csi.model_copy(update=update)})
    asyncio.run(run_node(settings))


@click.command("termination-imds")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Path of a kubeconfig; in-cluster config when unset.",
)
@click.option("--node-name", help="This node's Kubernetes name [nth.node_name, NODE_NAME].")
@click.option("--imds-endpoint", help="The instance metadata service [nth.imds_endpoint].")
@click.option(
    "--log-format", "process_log_format", type=click.Choice(LOG_FORMATS), help="Log lines."
)
def termination_imds(
    kubeconfig: Path | None,
    node_name: str | None,
    imds_endpoint: str | None,
    process_log_format: str | None,
) -> None:
    """The node termination handler's instance-metadata mode on this node (a DaemonSet): poll
    IMDSv2 for interruption notices and record them on this Node, for the starter to drain.

    It reads only its own settings (``CLOUDLOOP_PROVIDER``, ``CLOUDLOOP_NTH__IMDS_*``,
    ``NODE_NAME``) and the Kubernetes API: no Temporal setting, no cloud credential."""
    from cloudloop.nodeagents.termination_imds import run_imds_agent
    from cloudloop.settings import ImdsAgentSettings

    reconfigure_logging(process_log_format)
    settings = ImdsAgentSettings()
    if kubeconfig is not None:
        settings = settings.model_copy(update={"kubeconfig": kubeconfig})
    update = {k: v for k, v in (("node_name", node_name), ("imds_endpoint", imds_endpoint)) if v}
    settings = settings.model_copy(update={"nth": settings.nth.model_copy(update=update)})
    sys.exit(asyncio.run(run_imds_agent(settings)))


@click.command("codec-server")
@click.option("--port", type=click.IntRange(0, 65535), help="Listen port [codec_server.port].")
@click.option("--bind", help="Listen address [codec_server.bind].")
@process_options
def codec_server(settings: Settings, port: int | None, bind: str | None) -> None:
    """Serve Temporal's codec endpoint (POST /encode, /decode) for the Temporal UI and CLI:
    payloads decrypted with the key ring, behind an authorization check and CORS."""
    import signal
    import threading

    from cloudloop.codec import CodecConfigError, key_ring
    from cloudloop.codec_server import serve

    update = {k: v for k, v in (("port", port), ("bind", bind)) if v is not None}
    server_settings = settings.codec_server.model_copy(update=update)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        ring = key_ring(settings.temporal.codec)
        if ring is None:
            raise CodecConfigError("the payload codec is off (temporal.codec.enabled): no keys")
        serve(
            ring,
            server_settings,
            namespace=settings.temporal.namespace,
            kubeconfig=settings.kubeconfig,
            stop=stop,
        )
    except CodecConfigError as exc:
        logging.getLogger("cloudloop.codec").error("refusing to start: %s", exc)
        raise click.ClickException(str(exc)) from None


COMMANDS = (worker, starter, csi_controller, csi_node, termination_imds, codec_server)
