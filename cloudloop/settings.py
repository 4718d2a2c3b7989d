"""Process settings from environment (``CLOUDLOOP_*``, nested with ``__``) and a YAML file.

The YAML file is named by ``CLOUDLOOP_CONFIG``; environment values win over it. Secrets are
read from files or typed as :class:`pydantic.SecretStr`, so they never print in logs or reprs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

Provider = Literal["aws", "openstack", "vsphere", "zvirt", "dvp"]


class TemporalTlsSettings(BaseModel):
    """TLS towards the Temporal frontend; files come from a mounted Secret."""

    enabled: bool = False
    cert_file: Path | None = None
    key_file: Path | None = None
    #: Server CA; the system trust store when unset or missing.
    ca_file: Path | None = None


class TemporalSettings(BaseModel):
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "cloudloop"
    tls: TemporalTlsSettings = TemporalTlsSettings()
    api_key_file: Path | None = None
    #: Seconds a stopping worker waits for running activities before cancelling them.
    graceful_shutdown_s: float = 30.0


class AwsSettings(BaseModel):
    region: str = "us-east-1"
    #: Emulator or VPC endpoint; unset means the real AWS endpoints.
    endpoint_url: str | None = None
    #: An AWS shared-credentials file (mounted from a Secret); the standard chain when unset.
    credentials_file: Path | None = None
    profile: str | None = None
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    #: Per-request connect/read timeout; a cloud that does not answer is an error, never "gone".
    timeout_s: float = 10.0
    max_attempts: int = 3


class LeaderElectionSettings(BaseModel):
    enabled: bool = True
    namespace: str = Field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "kube-system"))
    name: str = "cloudloop-starter"
    identity: str = Field(default_factory=lambda: os.environ.get("POD_NAME") or os.uname().nodename)
    lease_duration_s: int = 15
    renew_deadline_s: int = 10
    retry_period_s: int = 2


class CcmSettings(BaseModel):
    """Cloud-controller-manager behaviour; names and defaults follow the upstream flags."""

    #: ``--node-monitor-period``: how often the lifecycle pass checks NotReady nodes.
    node_monitor_period_s: float = 5.0
    #: ``--node-status-update-frequency``: address refresh of initialized nodes.
    node_status_update_frequency_s: float = 300.0
    #: ``--concurrent-node-syncs``: parallel node initializations (kube API writes).
    concurrent_node_syncs: int = 1
    #: ``--concurrent-node-status-updates``: parallel address patches (0: concurrent_node_syncs).
    concurrent_node_status_updates: int = 0
    #: ``--concurrent-service-syncs``: parallel load-balancer syncs.
    concurrent_service_syncs: int = 1
    #: ``--configure-cloud-routes``: needs a valid ``cluster_cidr``.
    configure_cloud_routes: bool = True
    #: ``--cluster-cidr``: the pod network (one CIDR, or two comma-separated for dual-stack).
    cluster_cidr: str = ""
    #: ``--route-reconciliation-period``.
    route_reconciliation_period_s: float = 10.0
    #: How long node initialization waits to batch a burst of new nodes into one cloud call.
    init_batch_window_s: float = 0.1
    #: Label selector limiting the Nodes this CCM manages (empty: all Nodes).
    node_selector: str = ""


class Settings(BaseSettings):
    """Everything a worker or starter process needs to know."""

    model_config = SettingsConfigDict(
        env_prefix="CLOUDLOOP_", env_nested_delimiter="__", extra="ignore"
    )

    cluster_name: str = "cloudloop"
    provider: Provider = "aws"
    #: Path of a kubeconfig; in-cluster config when unset and ``KUBECONFIG`` is unset too.
    kubeconfig: Path | None = None
    metrics_port: int = 9464
    metrics_bind: str = "0.0.0.0"
    temporal: TemporalSettings = TemporalSettings()
    aws: AwsSettings = AwsSettings()
    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    ccm: CcmSettings = CcmSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("CLOUDLOOP_CONFIG")
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        sources.append(file_secret_settings)
        return tuple(sources)
