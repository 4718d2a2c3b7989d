"""The OpenStack section of the settings (``CLOUDLOOP_OPENSTACK__*``), shaped like ``cloud.conf``.

Sections mirror cloud-provider-openstack's ``cloud.conf``: ``connection`` ([Global]),
``networking`` ([Networking]), ``load_balancer`` ([LoadBalancer] and its classes), ``route``
([Route]) and ``block_storage`` ([BlockStorage]); field names are the INI keys with ``_``.

Rules:
- Upstream's own files are accepted as they are: ``cloud_config_file`` (a ``cloud.conf``, as
  Deckhouse renders it into the ``cloud-controller-manager`` Secret) and
  ``cluster_configuration_file`` (Deckhouse's ``OpenStackClusterConfiguration`` YAML, its
  ``provider`` block); :func:`cloudloop.cloud.openstack.config.resolve` lays them over these
  fields (cloud.conf last, as CPO reads only it).
- Secrets are ``SecretStr`` or ``*_file`` paths read at each login, so a rotated Secret is picked
  up and nothing secret prints; the cloud.conf file holds its password and is read the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class ConnectionSettings(BaseModel):
    """``[Global]``: Keystone v3 password or application-credential login, region, TLS."""

    auth_url: str = ""
    username: str = ""
    user_id: str = ""
    password: SecretStr | None = None
    #: A file holding the password (mounted from a Secret); wins over ``password``.
    password_file: Path | None = None
    #: ``tenant-id`` / ``tenant-name``: the project.
    tenant_id: str = ""
    tenant_name: str = ""
    tenant_domain_id: str = ""
    tenant_domain_name: str = ""
    #: ``domain-name``/``domain-id``: the user's domain (and the project's when not given).
    domain_id: str = ""
    domain_name: str = ""
    user_domain_id: str = ""
    user_domain_name: str = ""
    region: str = ""
    #: ``os-endpoint-type``: the catalog interface (public, internal, admin).
    os_endpoint_type: str = "public"
    ca_file: Path | None = None
    tls_insecure: bool = False
    application_credential_id: str = ""
    application_credential_name: str = ""
    application_credential_secret: SecretStr | None = None
    application_credential_secret_file: Path | None = None

    def password_value(self) -> str:
        if self.password_file is not None:
            return self.password_file.read_text().strip()
        return self.password.get_secret_value() if self.password is not None else ""

    def application_credential_secret_value(self) -> str:
        if self.application_credential_secret_file is not None:
            return self.application_credential_secret_file.read_text().strip()
        secret = self.application_credential_secret
        return secret.get_secret_value() if secret is not None else ""

    @property
    def uses_application_credential(self) -> bool:
        return bool(self.application_credential_id or self.application_credential_name)


class NetworkingSettings(BaseModel):
    """``[Networking]``: which server networks give InternalIP and ExternalIP addresses."""

    public_network_names: list[str] = Field(default_factory=list)
    internal_network_names: list[str] = Field(default_factory=list)
    ipv6_support_disabled: bool = False
    #: CIDRs; node addresses inside an earlier CIDR come first (``address-sort-order``).
    address_sort_order: list[str] = Field(default_factory=list)


class LoadBalancerClassSettings(BaseModel):
    """``[LoadBalancerClass "<name>"]``: placement chosen by the ``class`` annotation."""

    floating_network_id: str = ""
    floating_subnet_id: str = ""
    floating_subnet: str = ""
    floating_subnet_tags: str = ""
    network_id: str = ""
    subnet_id: str = ""
    member_subnet_id: str = ""


class LoadBalancerSettings(BaseModel):
    """``[LoadBalancer]`` with upstream's defaults (monitor durations in seconds)."""

    enabled: bool = True
    lb_provider: str = "amphora"
    lb_method: str = "ROUND_ROBIN"
    subnet_id: str = ""
    member_subnet_id: str = ""
    network_id: str = ""
    floating_network_id: str = ""
    floating_subnet_id: str = ""
    floating_subnet: str = ""
    floating_subnet_tags: str = ""
    internal_lb: bool = False
    node_selector: str = ""
    create_monitor: bool = False
    monitor_delay_s: int = 5
    monitor_timeout_s: int = 3
    monitor_max_retries: int = 1
    monitor_max_retries_down: int = 3
    cascade_delete: bool = True
    flavor_id: str = ""
    availability_zone: str = ""
    enable_ingress_hostname: bool = False
    ingress_hostname_suffix: str = "nip.io"
    max_shared_lb: int = 2
    provider_requires_serial_api_calls: bool = False
    classes: dict[str, LoadBalancerClassSettings] = Field(default_factory=dict)


class RouteSettings(BaseModel):
    """``[Route]``: the router whose extra routes carry the pod CIDRs (routes off when empty)."""

    router_id: str = ""


class BlockStorageSettings(BaseModel):
    """``[BlockStorage]`` (Cinder CSI)."""

    node_volume_attach_limit: int = 256
    rescan_on_resize: bool = False
    ignore_volume_az: bool = False
    ignore_volume_microversion: bool = False


class OpenStackSettings(BaseModel):
    #: a refused setting is named, never printed (its value may be a credential)
    model_config = ConfigDict(hide_input_in_errors=True)

    connection: ConnectionSettings = Field(default_factory=ConnectionSettings)
    networking: NetworkingSettings = Field(default_factory=NetworkingSettings)
    load_balancer: LoadBalancerSettings = Field(default_factory=LoadBalancerSettings)
    route: RouteSettings = Field(default_factory=RouteSettings)
    block_storage: BlockStorageSettings = Field(default_factory=BlockStorageSettings)
    #: Upstream's ``cloud.conf`` (INI, e.g. the ``cloud-config`` key of Deckhouse's Secret).
    cloud_config_file: Path | None = None
    #: Deckhouse's ``OpenStackClusterConfiguration`` (YAML); its ``provider`` block is used.
    cluster_configuration_file: Path | None = None
    #: ``openstack://<region>/<id>`` providerIDs (upstream env ``OS_CCM_REGIONAL=true``).
    regional_provider_id: bool = False
    #: Per-request timeout (upstream ``[Metadata] request-timeout``, 60 s).
    request_timeout_s: float = 60.0
    #: How long one driver call waits for Octavia/Cinder to leave a transitional state before
    #: it raises a retryable error (upstream: LB ACTIVE ≈271 s); the next call resumes.
    wait_timeout_s: float = 280.0
    #: First pause between two polls of a transitional state; grows by 1.2 times up to 5 s.
    poll_interval_s: float = 0.5
    #: Compute microversion for server lists (2.47 embeds the flavor: no flavor GET per node).
    compute_microversion: str = "2.47"
    #: Registration Secret parts (Deckhouse ``cloudProviderOpenstack.internal``).
    zones: list[str] = Field(default_factory=list)
    instances: dict[str, Any] = Field(default_factory=dict)
    pod_network_mode: str = "DirectRoutingWithPortSecurityEnabled"
    ssh_public_key: str = ""
    #: The cluster's tags (``OpenStackClusterConfiguration.tags``): node-group servers get them.
    tags: dict[str, str] = Field(default_factory=dict)
