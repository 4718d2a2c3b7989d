"""The ``cloudloop`` command: ``worker``, ``starter``, ``csi-controller``, ``csi-node``,
``termination-imds``, ``termination``, ``codec-server``,
``temporal setup``, ``temporal claims``, ``temporal release-claim``, ``retry``, ``nodegroup``
and ``layout``, plus the commands of plugins.

Plugins register through the ``cloudloop.commands`` entry point: a callable taking the command
group. The dev stack (``devstack``, installed by ``make setup`` only) adds ``dev``, ``status``,
``inject`` and ``stack`` that way, so the product itself never imports it.

Rules (the upstream cloud-controller-manager's conventions): ``--version``; ``--kubeconfig``
(in-cluster config when unset); ``--cloud-config`` names a YAML file holding the configured
provider's settings section (its keys are the ``CLOUDLOOP_<PROVIDER>__*`` names, lower case;
environment values win over it), or the provider's upstream configuration file when the
provider reads one (its ``config_file`` setting); ``--leader-elect[=true|false]`` on the starter;
``--log-format text|json``. A flag wins over the setting it overrides.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
import yaml
from pydantic import ValidationError

from cloudloop.cloud.registry import Settings
from cloudloop.errortext import describe_validation, yaml_problem
from cloudloop.settings import MAX_CONCURRENT_NODE_SYNCS

if TYPE_CHECKING:
    from cloudloop.layouts.config import LoadedConfig

F = TypeVar("F", bound=Callable[..., Any])
LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg`` (and ``exc``)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _logging(verbose: bool, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    )
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True
    )
    # keystoneauth logs request bodies at DEBUG (a server's user_data among them)
    quiet = ("keystoneauth", "leaderelection", "temporalio.activity")
    for noisy in ("urllib3", "botocore", "kubernetes", *quiet):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@click.group()
@click.version_option(package_name="cloudloop", prog_name="cloudloop")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.option(
    "--log-format", type=click.Choice(LOG_FORMATS), default="text", help="Log lines [text]."
)
@click.pass_context
def main(ctx: click.Context, verbose: bool, log_format: str) -> None:
    """cloudloop: Kubernetes cloud-provider integration on Temporal workflows."""
    ctx.obj = {"verbose": verbose}
    _logging(verbose, log_format)


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
        if process_log_format is not None:
            obj = click.get_current_context().find_root().obj or {}
            _logging(bool(obj.get("verbose")), process_log_format)
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


def require_codec(settings: Settings) -> None:
    """Stop with a clear error (and a log line) when the payload codec is on without its keys:
    a process that talks to Temporal never writes plaintext histories by accident."""
    from cloudloop.codec import CodecConfigError, key_ring

    try:
        key_ring(settings.temporal.codec)
    except CodecConfigError as exc:
        logging.getLogger("cloudloop.codec").error("refusing to start: %s", exc)
        raise click.ClickException(str(exc)) from None


@main.command()
@process_options
def worker(settings: Settings) -> None:
    """Run a Temporal worker (workflows + the configured cloud's activities)."""
    from cloudloop.heap import cap_malloc_arenas, pin_mmap_threshold
    from workers.main import run

    require_codec(settings)
    cap_malloc_arenas()
    pin_mmap_threshold()
    _refused_exits(lambda: asyncio.run(run(settings)))


def _refused_exits(run: Callable[[], None]) -> None:
    """Run a process; another cluster's claim on its queues ends it with the error, code 1."""
    from cloudloop.claim import ClaimRefused

    try:
        run()
    except ClaimRefused as exc:
        click.echo(f"Error: {exc}", err=True)
        _leave(1)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """A Go-style duration (``5s``, ``5m0s``, ``1h30m``, ``500ms``) in seconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise click.BadParameter(f"not a duration: {text!r} (use e.g. 5s, 5m, 1h30m)")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


class Duration(click.ParamType[float]):
    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        return value if isinstance(value, float) else parse_duration(str(value))


@main.command()
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
    _refused_exits(lambda: asyncio.run(run(with_ccm_flags(settings, flags))))


def with_ccm_flags(settings: Settings, flags: dict[str, Any]) -> Settings:
    """Settings with the upstream-named flags that were given applied to ``settings.ccm``."""
    renames = {
        "node_monitor_period": "node_monitor_period_s",
        "node_status_update_frequency": "node_status_update_frequency_s",
        "route_reconciliation_period": "route_reconciliation_period_s",
    }
    update = {renames.get(k, k): v for k, v in flags.items() if v is not None}
    return settings.model_copy(update={"ccm": settings.ccm.model_copy(update=update)})


@main.command("csi-controller")
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


@main.command("csi-node")
@click.option("--endpoint", help="CSI endpoint, unix:///path [csi.endpoint].")
@click.option("--node-name", help="This node's Kubernetes name [csi.node_name, NODE_NAME].")
@process_options
def csi_node(settings: Settings, endpoint: str | None, node_name: str | None) -> None:
    """Serve the CSI Identity and Node services (format, mount, expand on this node)."""
    from cloudloop.csi.server import run_node

    update = {k: v for k, v in (("endpoint", endpoint), ("node_name", node_name)) if v}
    settings = settings.model_copy(update={"csi": settings.csi.model_copy(update=update)})
    asyncio.run(run_node(settings))


@main.command("termination-imds")
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

    if process_log_format is not None:
        obj = click.get_current_context().find_root().obj or {}
        _logging(bool(obj.get("verbose")), process_log_format)
    settings = ImdsAgentSettings()
    if kubeconfig is not None:
        settings = settings.model_copy(update={"kubeconfig": kubeconfig})
    update = {k: v for k, v in (("node_name", node_name), ("imds_endpoint", imds_endpoint)) if v}
    settings = settings.model_copy(update={"nth": settings.nth.model_copy(update=update)})
    sys.exit(asyncio.run(run_imds_agent(settings)))


@main.command("codec-server")
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


@main.group()
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


@main.group()
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
    _leave(code)


@main.group()
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


@main.group()
def nodegroup() -> None:
    """Node groups from InstanceClasses (Cluster API MachineDeployments)."""


@nodegroup.command("render")
@click.option(
    "--instance-class",
    "instance_class_file",
    type=click.File("r"),
    required=True,
    help="The InstanceClass (DVP, zVirt, OpenStack) as YAML ('-': stdin).",
)
@click.option("--name", required=True, help="The node group's name.")
@click.option("--cluster", required=True, help="The Cluster API Cluster the machines join.")
@click.option("--namespace", "-n", default="default", show_default=True)
@click.option("--zones", default="default", show_default=True, help="Comma-separated zones.")
@click.option("--replicas", type=click.IntRange(min=0), help="Machines per zone (unset: keep).")
@click.option("--bootstrap-secret", help="The bootstrap data Secret every machine uses.")
@click.option("--bootstrap-config-template", help="A KubeadmConfigTemplate name instead.")
@click.option("--cluster-uuid", default="", help="Mixed into the names (Deckhouse's cluster UUID).")
@click.option(
    "--provider-values",
    "provider_values_file",
    type=click.File("r"),
    help="The registration Secret's <type> subtree (JSON/YAML) the template reads as .provider.",
)
@click.option("--pod-subnet", default="", help="The cluster's pod subnet (.cluster.podSubnet).")
@click.option("--max-surge", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--max-unavailable", type=click.IntRange(min=0), default=0, show_default=True)
def nodegroup_render(
    instance_class_file: Any,
    name: str,
    cluster: str,
    namespace: str,
    zones: str,
    replicas: int | None,
    bootstrap_secret: str | None,
    bootstrap_config_template: str | None,
    cluster_uuid: str,
    provider_values_file: Any,
    pod_subnet: str,
    max_surge: int,
    max_unavailable: int,
) -> None:
    """Print a MachineDeployment and its InfraMachineTemplate per zone, rendered from an
    InstanceClass by its provider's template.yaml; apply them, then ``kubectl scale``."""
    import yaml

    from cloudloop.cloud.registry import PROVIDERS
    from cloudloop.nodegroup.contract import ContractError
    from cloudloop.nodegroup.render import Bootstrap, NodeGroup, render_node_group

    if max_surge == 0 and max_unavailable == 0:
        raise click.UsageError("--max-surge and --max-unavailable cannot both be 0")
    if bool(bootstrap_secret) == bool(bootstrap_config_template):
        raise click.UsageError("give one of --bootstrap-secret and --bootstrap-config-template")
    instance_class = yaml.safe_load(instance_class_file)
    if not isinstance(instance_class, dict):
        raise click.BadParameter("not a Kubernetes object", param_hint="--instance-class")
    provider_values = yaml.safe_load(provider_values_file) if provider_values_file else {}
    if not isinstance(provider_values, dict):
        raise click.BadParameter("not a mapping", param_hint="--provider-values")
    kind = str(instance_class.get("kind") or "")
    provider = next(
        (
            p
            for p in PROVIDERS.values()
            if p.node_templates is not None and p.node_templates.instance_class.kind == kind
        ),
        None,
    )
    if provider is None or provider.node_templates is None or provider.infra_kinds is None:
        raise click.BadParameter(
            f"no provider renders {kind or 'this kind'}", param_hint="--instance-class"
        )
    group = NodeGroup(
        name=name,
        instance_class=instance_class,
        cluster=cluster,
        namespace=namespace,
        bootstrap=Bootstrap(
            data_secret_name=bootstrap_secret or "",
            config_template_name=bootstrap_config_template or "",
        ),
        replicas=replicas,
        zones=tuple(z.strip() for z in zones.split(",") if z.strip()),
        cluster_uuid=cluster_uuid,
        provider_values=provider_values,
        pod_subnet=pod_subnet,
        max_surge=max_surge,
        max_unavailable=max_unavailable,
    )
    try:
        objects = render_node_group(group, provider.infra_kinds, provider.node_templates)
    except ContractError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)


@main.group()
def layout() -> None:
    """Layouts: base infrastructure, master and static nodes as durable workflows (plan, apply,
    destroy, and adopt of what the upstream Terraform state lists).

    ``--config`` is the cluster's YAML: its ``<Provider>ClusterConfiguration`` (with the
    credentials) and optionally its ``ClusterConfiguration`` (``cloud.prefix``,
    ``podSubnetCIDR``). The document is validated here, every error at once, before anything
    else happens; the workers read the file themselves (only its path goes to Temporal): at the
    same path, or at ``--worker-config-path`` (e.g. a Secret mounted into the worker).
    """


def layout_options(command: F) -> F:
    @click.option(
        "--config",
        "config_path",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        required=True,
        help="The cluster's configuration YAML.",
    )
    @click.option("--prefix", help="cloud.prefix (wins over the ClusterConfiguration's).")
    @click.option("--cluster-uuid", help="The cluster's UUID (in every resource's tags).")
    @click.option("--pod-subnet-cidr", help="podSubnetCIDR (wins over the ClusterConfiguration's).")
    @click.option("--temporal-address", help="Temporal frontend [temporal.address].")
    @click.option("--task-queue", help="The workers' task queue [temporal.task_queue].")
    @click.option(
        "--worker-config-path",
        help="Where the workers read this file: under their layouts.source_dir (the chart's "
        "layouts.mountPath; a relative name is taken inside it) [its own path].",
    )
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return command(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def bootstrap_option(command: F) -> F:
    """``--cloud-config [SELECTOR=]FILE`` (repeatable) of the commands that make machines."""
    return click.option(
        "--cloud-config",
        "cloud_config",
        multiple=True,
        metavar="[SELECTOR=]FILE",
        help="Bootstrap data (dhctl's cloudConfig, the file's bytes as they are) of every node, "
        "or of the nodes SELECTOR names: master, a static node group, or a node's name. The "
        "workers read FILE under their layouts.source_dir (a relative name inside it). "
        "Without --worker-config-path (workers on this machine) an existing local file is "
        "passed by its absolute path; with it, every name as given. Only its name and digest "
        "go to Temporal.",
    )(command)


def _cloud_config(values: tuple[str, ...], *, workers_elsewhere: bool) -> dict[str, str]:
    """The ``--cloud-config`` values as selector → file (the workers' name of it): a local file
    by its absolute path unless the workers read their own files (``workers_elsewhere``)."""
    from cloudloop.layouts.bootstrap import BootstrapInvalid, parse_option

    selection: dict[str, str] = {}
    for value in values:
        try:
            selector, file = parse_option(value)
        except BootstrapInvalid as exc:
            raise click.BadParameter(str(exc), param_hint="--cloud-config") from None
        if selector in selection:
            named = selector or "every node"
            raise click.BadParameter(f"{named} is given twice", param_hint="--cloud-config")
        local = Path(file)
        if not workers_elsewhere and local.is_file():
            file = str(local.resolve())
        elif not workers_elsewhere and local.exists():
            raise click.BadParameter(f"{file}: not a file", param_hint="--cloud-config")
        selection[selector] = file
    return selection


def _loaded_part(flags: dict[str, Any]) -> tuple[LoadedConfig, Any]:
    """The validated configuration and its provider's layout part (or a clean error exit)."""
    from cloudloop.cloud.registry import PROVIDERS
    from cloudloop.layouts.config import InvalidConfig, load_documents

    path: Path = flags["config_path"]
    try:
        loaded = load_documents(
            list(yaml.safe_load_all(path.read_text())),
            source=str(path),
            prefix=flags["prefix"],
            uuid=flags["cluster_uuid"],
            pod_subnet_cidr=flags["pod_subnet_cidr"],
        )
    except yaml.YAMLError as exc:
        raise click.ClickException(f"{path}: {yaml_problem(exc)}") from None
    except InvalidConfig as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    record = PROVIDERS.get(loaded.provider)
    if record is None or record.layouts is None:
        raise click.ClickException(f"{loaded.provider}: no layouts yet")
    part = record.layouts()
    supported = part.layouts
    if loaded.document.layout not in supported:
        raise click.ClickException(
            f"{loaded.provider} layout {loaded.document.layout} is not supported "
            f"(supported: {', '.join(supported)})"
        )
    return loaded, part


def _temporal_settings(flags: dict[str, Any]) -> tuple[Settings, Any]:
    """The process's settings (the codec required) and its Temporal settings with the flags'."""
    settings = Settings()
    require_codec(settings)
    return settings, settings.temporal.model_copy(
        update={
            k: v
            for k, v in (
                ("address", flags["temporal_address"]),
                ("task_queue", flags["task_queue"]),
            )
            if v
        }
    )


def _config_source(flags: dict[str, Any]) -> Any:
    """Where the workers read the configuration and the bootstrap data."""
    from cloudloop.layouts.model import ConfigSource

    path: Path = flags["config_path"]
    return ConfigSource(
        file=flags["worker_config_path"] or str(path.resolve()),
        cloud_config=_cloud_config(
            flags.get("cloud_config", ()), workers_elsewhere=bool(flags["worker_config_path"])
        ),
    )


def _layout_run(
    action: str,
    flags: dict[str, Any],
    *,
    plan_destroy: bool = False,
    state_sources: list[str] | None = None,
    kubeconfig: Path | None = None,
) -> Any:
    """Validate, start the action, follow it; the result (or a clean error exit)."""
    from cloudloop import claim
    from cloudloop.cloud.layouts import AdoptingPart
    from cloudloop.messages.layout import LayoutInput
    from starters.layout import LayoutFailed, run_layout

    loaded, part = _loaded_part(flags)
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
    settings, temporal_settings = _temporal_settings(flags)
    input = LayoutInput(
        action=action,
        provider=loaded.provider,
        source=_config_source(flags),
        cluster=loaded.cluster,
        plan_destroy=plan_destroy,
        state=state,
        kubeconfig=(
            (flags.get("worker_kubeconfig_path") or str(kubeconfig.resolve()))
            if action == "destroy" and kubeconfig is not None
            else ""
        ),
        id_scope=temporal_settings.id_scope,
    )

    async def go() -> Any:
        from cloudloop.temporal import connect

        client = await connect(temporal_settings)
        # The layout runs on this cluster's queue with its workers' cloud credentials: never on
        # a queue another cluster serves (checked before anything is started).
        mine = claim.ClusterIdentity.named_by(settings)
        await claim.refuse_if_claimed_elsewhere(client, [temporal_settings.task_queue], mine)
        return await run_layout(client, temporal_settings.task_queue, input, report=click.echo)

    try:
        return asyncio.run(go())
    except claim.ClaimRefused as exc:
        click.echo(f"Error: {exc}", err=True)
        _leave(1)
    except LayoutFailed as exc:
        click.echo(f"Error: {action} failed: {exc}", err=True)
        _leave(1)
    except (ConnectionError, RuntimeError) as exc:
        click.echo(f"Error: Temporal at {temporal_settings.address}: {exc}", err=True)
        _leave(1)


def _leave(code: int) -> NoReturn:
    """Exit without finalizing the interpreter: the Temporal SDK's core threads may still call
    into Python while it finalizes (an abort at exit, as ``temporal setup`` found)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@layout.command("plan")
@layout_options
@bootstrap_option
@click.option("--destroy", "plan_destroy", is_flag=True, help="Plan the destroy instead.")
def layout_plan(plan_destroy: bool, **flags: Any) -> None:
    """Show what apply would create, change (drift included) or leave — or, with
    ``--destroy``, what destroy would delete; changes nothing."""
    result = _layout_run("plan", flags, plan_destroy=plan_destroy)
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
    _leave(0)


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
    result = _layout_run("apply", flags)
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
        from cloudloop.cloud.layouts import AdoptingPart
        from cloudloop.cloud.registry import PROVIDERS
        from cloudloop.kube.api import Kube, KubeError
        from cloudloop.kube.client import api_client
        from cloudloop.layouts.config import DOCUMENTS
        from starters.layout import publish

        loaded = _loaded(flags)
        record = PROVIDERS[loaded.provider]
        part = record.layouts() if record.layouts is not None else None
        documents = [
            d
            for d in yaml.safe_load_all(flags["config_path"].read_text())
            if isinstance(d, dict) and d.get("kind") in DOCUMENTS
        ]
        try:
            written = publish(
                Kube(api_client(kubeconfig)),
                result,
                state_types=part.state_types if isinstance(part, AdoptingPart) else None,
                provider_document=yaml.safe_dump(documents[0], sort_keys=False)
                if len(documents) == 1
                else None,
                cluster_uuid=loaded.cluster.uuid,
            )
            for name in written:
                kind = "ConfigMap" if name == "kube-system/d8-cluster-uuid" else "Secret"
                click.echo(f"written: {kind} {name}")
        except (KubeError, OSError) as exc:
            click.echo(f"Error: writing the results into the cluster: {exc}", err=True)
            _leave(1)
    _leave(0)


def _loaded(flags: dict[str, Any]) -> LoadedConfig:
    """The (already validated) configuration file's documents."""
    from cloudloop.layouts.config import load_documents

    return load_documents(
        list(yaml.safe_load_all(flags["config_path"].read_text())),
        prefix=flags["prefix"],
        uuid=flags["cluster_uuid"],
        pod_subnet_cidr=flags["pod_subnet_cidr"],
    )


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
    result = _layout_run("adopt", flags, state_sources=list(states), kubeconfig=kubeconfig)
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
    _leave(0)


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
    result = _layout_run("destroy", flags, kubeconfig=kubeconfig)
    deleted = sum(1 for m in result.modules for s in m.steps if s.action == "deleted")
    click.echo(f"Destroy complete: {deleted} resource(s) deleted.")
    _leave(0)


@layout.group("converge")
def layout_converge() -> None:
    """The in-cluster converge (terraform-manager's job): a Temporal Schedule per cluster whose
    pass plans the layout every interval, reports each module's status (the status ConfigMap,
    exported by the starter as ``candi_converge_*`` metrics), applies what is safe with
    ``--auto``, and holds every destructive step until ``cloudloop layout approve``."""


def temporal_options(command: F) -> F:
    @click.option("--temporal-address", help="Temporal frontend [temporal.address].")
    @click.option("--task-queue", help="The workers' task queue [temporal.task_queue].")
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return command(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _converge_call(flags: dict[str, Any], call: Callable[[Any, Any], Awaitable[Any]]) -> Any:
    """Run ``call(client, temporal_settings)`` on the cluster's Temporal (a clean exit on error)."""
    from temporalio.service import RPCError

    _, temporal_settings = _temporal_settings(flags)

    async def go() -> Any:
        from cloudloop.temporal import connect

        return await call(await connect(temporal_settings), temporal_settings)

    try:
        return asyncio.run(go())
    except RPCError as exc:
        click.echo(f"Error: Temporal at {temporal_settings.address}: {exc.message}", err=True)
        _leave(1)
    except (ConnectionError, RuntimeError) as exc:
        click.echo(f"Error: Temporal at {temporal_settings.address}: {exc}", err=True)
        _leave(1)


@layout_converge.command("install")
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

    loaded, _ = _loaded_part(flags)
    settings, temporal_settings = _temporal_settings(flags)
    converge = settings.layouts.converge
    input = ConvergeInput(
        provider=loaded.provider,
        source=_config_source(flags),
        cluster=loaded.cluster,
        id_scope=temporal_settings.id_scope,
        auto=converge.auto if auto is None else auto,
        approval_wait_s=approval_wait_s or converge.approval_wait_s,
        bootstrap_from_cluster=bootstrap_from_cluster,
    )
    interval = interval_s or converge.interval_s

    async def call(client: Any, temporal: Any) -> str:
        mine = claim.ClusterIdentity.named_by(settings)
        await claim.refuse_if_claimed_elsewhere(client, [temporal.task_queue], mine)
        return await install_schedule(client, temporal.task_queue, input, interval)

    try:
        done = _converge_call(flags, call)
    except claim.ClaimRefused as exc:
        click.echo(f"Error: {exc}", err=True)
        _leave(1)
    sid = schedule_id(loaded.cluster.prefix, temporal_settings.id_scope)
    mode = "auto" if input.auto else "plan only"
    click.echo(f"Schedule {sid} {done}: a pass every {interval:.0f} s ({mode}).")
    _leave(0)


@layout_converge.command("run")
@click.argument("prefix")
@temporal_options
def layout_converge_run(prefix: str, **flags: Any) -> None:
    """Start a pass of PREFIX's converge now (none when one is running)."""
    from starters.layout_converge import trigger

    async def call(client: Any, temporal: Any) -> None:
        await trigger(client, prefix, temporal.id_scope)

    _converge_call(flags, call)
    click.echo(f"converge of {prefix}: a pass was asked for")
    _leave(0)


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


@layout_converge.command("status")
@click.argument("prefix")
@temporal_options
def layout_converge_status(prefix: str, **flags: Any) -> None:
    """Show the running pass of PREFIX's converge: its statuses and the steps it holds."""
    from starters.layout_converge import pass_state, running_pass

    async def call(client: Any, temporal: Any) -> Any:
        handle = await running_pass(client, prefix, temporal.id_scope)
        return None if handle is None else await pass_state(handle)

    state = _converge_call(flags, call)
    if state is None:
        click.echo(f"converge of {prefix}: no pass is running")
    else:
        _print_state(state)
    _leave(0)


@layout.command("approve")
@click.argument("prefix")
@click.option("--step", default="", help="The held step's key (shown by status) [every one].")
@temporal_options
def layout_approve(prefix: str, step: str, **flags: Any) -> None:
    """Approve the destructive steps PREFIX's running converge pass holds (an approval given
    twice acts once)."""
    from temporalio.client import WorkflowUpdateFailedError

    from starters.layout_converge import approve, running_pass

    async def call(client: Any, temporal: Any) -> Any:
        handle = await running_pass(client, prefix, temporal.id_scope)
        if handle is None:
            return None
        return await approve(handle, step)

    try:
        result = _converge_call(flags, call)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        click.echo(f"Error: approve refused: {getattr(cause, 'message', cause)}", err=True)
        _leave(1)
    if result is None:
        click.echo(f"Error: no converge pass of {prefix} is running", err=True)
        _leave(1)
    for key in result.approved:
        click.echo(f"approved: {key}")
    for key in result.already:
        click.echo(f"already approved: {key}")
    _leave(0)


def _load_plugins() -> None:
    for entry in importlib.metadata.entry_points(group="cloudloop.commands"):
        try:
            register = entry.load()
        except ImportError as exc:  # a half-installed plugin must not break the product's commands
            logging.getLogger(__name__).debug("plugin %s not loaded: %s", entry.name, exc)
            continue
        register(main)


_load_plugins()

if __name__ == "__main__":
    main()
