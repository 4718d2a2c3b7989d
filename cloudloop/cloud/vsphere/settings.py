"""vSphere settings: upstream's ``vsphere.conf`` and credentials Secret, or Deckhouse's fields.

:class:`VsphereSettings` is the provider's settings section; :func:`resolve` turns it into one
:class:`Connection` (where vCenter is, how to trust it, how to log in, tag categories, address
rules), reading files at use so a rotated Secret is picked up at the next login.
Why (and the departures): docs/decisions/0045-vsphere-configuration-and-lookups-as-upstream.md.

Rules:
- Sources, weakest first: ``config_file``, upstream's ``VSPHERE_*`` environment, then the
  Deckhouse fields set here; a Deckhouse field set wins over the file.
- Credentials, first that applies: ``password_file``, ``password``, ``credentials_dir``, the
  file's ``secretsDirectory``, its named Secret mounted at ``/etc/cloud/secrets`` (not mounted:
  refused, saying so), the file's ``user``/``password``, then ``/etc/cloud/secrets``.
- TLS: a CA file or a thumbprint verifies vCenter; ``insecure`` skips verification only when
  asked; otherwise the system trust store. A CA bundle with ``insecure`` is refused.
- One vCenter: a configuration naming more than one host is refused with a clear error.
- Tag categories default to ``k8s-region``/``k8s-zone``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr

from cloudloop.cloud.vsphere.config import (
    CloudConfig,
    ConfigError,
    NodesConfig,
    VcenterConfig,
    apply_env,
    parse_cloud_config,
    read_credentials,
)

DEFAULT_REGION_CATEGORY = "k8s-region"
DEFAULT_ZONE_CATEGORY = "k8s-zone"
#: Upstream's default ``secretsDirectory``: used when it exists and nothing else is set.
DEFAULT_SECRETS_DIR = Path("/etc/cloud/secrets")


class InstanceClassDefaults(BaseModel):
    """Deckhouse ``instanceClassDefaults``: what a VsphereInstanceClass leaves out (published in
    the registration Secret; the machine template reads them)."""

    #: The VM template, relative to the datacenter (Deckhouse ``template``).
    template: str = ""
    datastore: str = ""
    #: The resource pool, relative to the zone's compute cluster (Deckhouse ``resourcePoolPath``).
    resource_pool_path: str = ""
    disable_timesync: bool = True


class VsphereSettings(BaseModel):
    """vCenter access and the CPI's options (``CLOUDLOOP_VSPHERE__*``)."""

    #: a refused setting is named, never printed (its value may be a credential)
    model_config = ConfigDict(hide_input_in_errors=True)

    #: Upstream ``vsphere.conf`` (YAML or INI), e.g. the ``vsphere-cloud-config`` ConfigMap.
    config_file: Path | None = None
    #: The mounted credentials Secret (``<server>.username``/``<server>.password`` files).
    credentials_dir: Path | None = None
    # -- Deckhouse VsphereClusterConfiguration.provider (each wins over the config file) --------
    #: vCenter host (``host`` or ``host:port``).
    server: str = ""
    username: str = ""
    password: SecretStr | None = None
    #: A file holding the password (mounted from a Secret); wins over ``password``.
    password_file: Path | None = None
    insecure: bool = False
    #: PEM CA bundle of vCenter (Deckhouse ``caBundle``; upstream ``caFile``).
    ca_bundle: Path | None = None
    #: vCenter certificate thumbprint (SHA-1 ``AB:CD:...`` or SHA-256).
    thumbprint: str = ""
    #: Datacenters to look in (empty: all; upstream ``datacenters``).
    datacenters: list[str] = []
    # -- Deckhouse cluster fields ----------------------------------------------------------------
    #: Tag category whose tag on the Datacenter names the region (upstream ``labels.region``).
    region_tag_category: str = ""
    #: Tag category whose tags on clusters/hosts/VMs/datastores name zones (``labels.zone``).
    zone_tag_category: str = ""
    #: The region (Deckhouse ``region``: a tag of ``region_tag_category`` on one Datacenter).
    region: str = ""
    #: Zones the cluster uses (Deckhouse ``zones``); empty: every zone tag found.
    zones: list[str] = []
    vm_folder_path: str = ""
    #: The datacenter node-group VMs go to (paths in machine specs are relative to it; empty:
    #: the only one vCenter has).
    datacenter: str = ""
    #: The first NIC's network of node-group VMs (Deckhouse ``instances.mainNetwork``).
    main_network: str = ""
    #: What a VsphereInstanceClass leaves out (Deckhouse ``instanceClassDefaults``).
    instance_class_defaults: InstanceClassDefaults = InstanceClassDefaults()
    #: Zone → its compute cluster's inventory path (Deckhouse ``zoneComputeClusterPaths``): a
    #: machine in that zone with no resource pool goes to the cluster's root pool.
    zone_compute_cluster_paths: dict[str, str] = {}
    base_resource_pool: str = ""
    internal_network_names: list[str] = []
    external_network_names: list[str] = []
    internal_network_cidr: str = ""
    #: Storage policy for new disks (Deckhouse ``storagePolicyID``).
    storage_policy_id: str = ""
    #: Datastore new volumes go to when the request names no zone (default: the first zoned).
    default_datastore: str = ""
    ssh_public_key: str = ""
    #: Tag category of the cluster tag on first-class disks (the volume's cluster identity).
    cluster_tag_category: str = "cloudloop-cluster"
    # -- behaviour ---------------------------------------------------------------------------------
    #: Per-request timeout; a vCenter that does not answer is an error, never "not found".
    timeout_s: float = 30.0
    #: How long one driver call waits for a vCenter task before it returns a retryable error.
    wait_timeout_s: float = 120.0
    poll_interval_s: float = 0.2
    #: A cached inventory older than this is read again (the node-sync pass reads it anyway).
    tag_cache_s: float = 300.0
    #: By-name lookups (node init) reuse an inventory read this young when it answers every
    #: name (else they read afresh); lookups by providerID (lifecycle, the only ones that can
    #: prove absence) always read afresh.
    name_lookup_reuse_s: float = 30.0


@dataclass(frozen=True)
class Connection:
    """Everything a driver needs to reach one vCenter, resolved from the settings."""

    host: str
    port: int
    credentials: Callable[[], tuple[str, str]] = field(repr=False)
    insecure: bool = False
    ca_file: Path | None = None
    thumbprint: str = ""
    datacenters: tuple[str, ...] = ()
    region_category: str = DEFAULT_REGION_CATEGORY
    zone_category: str = DEFAULT_ZONE_CATEGORY
    nodes: NodesConfig = field(default_factory=NodesConfig)
    ip_families: tuple[str, ...] = ("ipv4",)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"


def _load_config(settings: VsphereSettings) -> CloudConfig:
    text = settings.config_file.read_text() if settings.config_file is not None else ""
    config = parse_cloud_config(text, require_credentials=False) if text.strip() else CloudConfig()
    return apply_env(config, require_credentials=False)


def _split_server(server: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 address."""
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return host, int(port) if port.isascii() and port.isdigit() else None
    if server.count(":") == 1:
        host, port = server.split(":")
        if not (port.isascii() and port.isdigit()):
            raise ConfigError(f"server: {server!r} has no valid port")
        return host, int(port)
    return server, None


def _nodes(settings: VsphereSettings, config: NodesConfig) -> NodesConfig:
    """Deckhouse's network names replace the file's; its internal CIDR fills an unset one."""
    nodes = config
    if settings.internal_network_names or settings.external_network_names:
        nodes = replace(
            nodes,
            internal_network_names=tuple(settings.internal_network_names),
            external_network_names=tuple(settings.external_network_names),
        )
    if settings.internal_network_cidr and not nodes.internal_subnets:
        nodes = replace(nodes, internal_subnets=(settings.internal_network_cidr,))
    return nodes


def resolve(
    settings: VsphereSettings, *, default_secrets_dir: Path = DEFAULT_SECRETS_DIR
) -> Connection:
    """The one vCenter to talk to; :class:`ConfigError` when the settings do not name one."""
    config = _load_config(settings)
    servers = {(vc.server, vc.port) for vc in config.vcenters}
    if len(servers) > 1:
        raise ConfigError("more than one vCenter is configured; cloudloop supports one")
    vc = config.vcenters[0] if config.vcenters else VcenterConfig(server="")
    host, port = vc.server, vc.port
    if settings.server:
        host, explicit_port = _split_server(settings.server)
        port = explicit_port or port
    if not host:
        raise ConfigError("no vCenter: set server or a vsphere.conf with a vcenter entry")
    if settings.ca_bundle is not None and settings.insecure:
        raise ConfigError("caBundle and insecure exclude each other")
    source = config.credential_source(vc)
    secrets_dir: Path | None = settings.credentials_dir
    if secrets_dir is None and source == "directory":
        secrets_dir = Path(config.secrets_directory)
    explicit = settings.password_file is not None or settings.password is not None
    if secrets_dir is None and source == "secret" and not explicit:
        if not default_secrets_dir.is_dir():
            namespace = vc.secret_namespace or config.secret_namespace
            name = vc.secret_name or config.secret_name
            raise ConfigError(
                f"secretName {namespace}/{name}: mount the Secret at {default_secrets_dir} or "
                "set credentials_dir (secrets are read from files)"
            )
        secrets_dir = default_secrets_dir
    username_setting, config_user = settings.username, vc.user
    password_setting, password_file = settings.password, settings.password_file
    config_password = vc.password
    secret_key = host  # upstream looks the Secret up by the entry's server

    def credentials() -> tuple[str, str]:
        if password_file is not None:
            return username_setting or config_user, password_file.read_text().strip()
        if password_setting is not None:
            return username_setting or config_user, password_setting.get_secret_value()
        if secrets_dir is not None:
            found = read_credentials(secrets_dir, secret_key)
            if found is None:
                raise ConfigError(f"the credentials Secret has no entry for {secret_key}")
            return found
        if config_user and config_password:
            return config_user, config_password
        if default_secrets_dir.is_dir():  # upstream's default secretsDirectory, if mounted
            found = read_credentials(default_secrets_dir, secret_key)
            if found is not None:
                return found
        raise ConfigError("no vCenter credentials configured")

    return Connection(
        host=host,
        port=port,
        credentials=credentials,
        insecure=settings.insecure or (vc.insecure and settings.ca_bundle is None),
        ca_file=settings.ca_bundle or (Path(vc.ca_file) if vc.ca_file else None),
        thumbprint=settings.thumbprint or vc.thumbprint,
        datacenters=tuple(settings.datacenters) or vc.datacenters,
        region_category=settings.region_tag_category
        or config.region_category
        or DEFAULT_REGION_CATEGORY,
        zone_category=settings.zone_tag_category or config.zone_category or DEFAULT_ZONE_CATEGORY,
        nodes=_nodes(settings, config.nodes),
        ip_families=vc.ip_family,
    )
