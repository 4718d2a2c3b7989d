"""What every layout command shares: its options, and the request it builds from them once —
the configuration file read and validated, its layout checked against the provider's, the
Temporal settings, and where the workers read the file and the bootstrap data.

Rules: the file is read once per command, before anything else happens, every error at once;
a bad file or flag is a clean error exit (code 2 for an invalid document, 1 otherwise), never
a traceback.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from cloudloop.cli.root import F, leave, require_codec
from cloudloop.cloud.registry import Settings
from cloudloop.errortext import yaml_problem

if TYPE_CHECKING:
    from cloudloop.layouts.config import LoadedConfig
    from cloudloop.settings import TemporalSettings


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


def temporal_options(command: F) -> F:
    @click.option("--temporal-address", help="Temporal frontend [temporal.address].")
    @click.option("--task-queue", help="The workers' task queue [temporal.task_queue].")
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return command(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class LayoutRequest:
    """A layout command's configuration, read and validated once."""

    path: Path
    #: The file's YAML documents, as read.
    documents: list[Any]
    loaded: LoadedConfig
    #: The provider's layout part (:class:`cloudloop.cloud.layouts.LayoutPart`).
    part: Any

    @property
    def provider_document(self) -> str | None:
        """The ``<Provider>ClusterConfiguration`` as YAML (what dhctl keeps in the cluster)."""
        from cloudloop.layouts.config import DOCUMENTS

        kept = [d for d in self.documents if isinstance(d, dict) and d.get("kind") in DOCUMENTS]
        return yaml.safe_dump(kept[0], sort_keys=False) if len(kept) == 1 else None


def load_request(flags: dict[str, Any]) -> LayoutRequest:
    """The validated configuration and its provider's layout part (or a clean error exit)."""
    from cloudloop.cloud.registry import PROVIDERS
    from cloudloop.layouts.config import InvalidConfig, load_documents

    path: Path = flags["config_path"]
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
        loaded = load_documents(
            documents,
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
    return LayoutRequest(path=path, documents=documents, loaded=loaded, part=part)


def temporal_settings(flags: dict[str, Any]) -> tuple[Settings, TemporalSettings]:
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


def config_source(flags: dict[str, Any]) -> Any:
    """Where the workers read the configuration and the bootstrap data."""
    from cloudloop.layouts.model import ConfigSource

    path: Path = flags["config_path"]
    return ConfigSource(
        file=flags["worker_config_path"] or str(path.resolve()),
        cloud_config=_cloud_config(
            flags.get("cloud_config", ()), workers_elsewhere=bool(flags["worker_config_path"])
        ),
    )


def temporal_call(flags: dict[str, Any], call: Callable[[Any, Any], Awaitable[Any]]) -> Any:
    """Run ``call(client, temporal_settings)`` on the cluster's Temporal (a clean exit on error)."""
    from temporalio.service import RPCError

    _, temporal = temporal_settings(flags)

    async def go() -> Any:
        from cloudloop.temporal import connect

        return await call(await connect(temporal), temporal)

    try:
        return asyncio.run(go())
    except RPCError as exc:
        click.echo(f"Error: Temporal at {temporal.address}: {exc.message}", err=True)
        leave(1)
    except (ConnectionError, RuntimeError) as exc:
        click.echo(f"Error: Temporal at {temporal.address}: {exc}", err=True)
        leave(1)
