"""``cloudloop nodegroup render``: a node group's Cluster API objects from an InstanceClass.

Rules: prints YAML and changes nothing; the provider is found by the InstanceClass's kind.
"""

from __future__ import annotations

from typing import Any

import click


@click.group()
def nodegroup() -> None:
    """Node groups from InstanceClasses (Cluster API MachineDeployments)."""


@nodegroup.command("render")
@click.option(
    "--instance-class",
    "instance_class_file",
    type=click.File("r"),
    required=True,
    help="The InstanceClass (AWS, DVP, OpenStack, vSphere, zVirt) as YAML ('-': stdin).",
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
