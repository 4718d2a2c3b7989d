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


class ZvirtSettings(BaseModel):
    """zVirt / oVirt Engine API access (the ``provider`` parameters of cloud-provider-zvirt)."""

    #: The engine's API, e.g. ``https://zvirt.example.com/ovirt-engine/api``.
    api_url: str = ""
    username: str = "admin@internal"
    password: SecretStr | None = None
    #: A file holding the password (mounted from a Secret); wins over ``password``.
    password_file: Path | None = None
    #: Skip TLS verification of the engine (Deckhouse ``insecure``).
    insecure: bool = False
    #: PEM file with the engine's CA (Deckhouse ``caBundle``); the system store when unset.
    ca_bundle: Path | None = None
    #: The zVirt cluster VMs are created in (Deckhouse ``clusterID``).
    cluster_id: str = ""
    #: SSH key published in the registration Secret (Deckhouse ``sshPublicKey``).
    ssh_public_key: str = ""
    #: Per-request timeout; an engine that does not answer is an error, never "not found".
    timeout_s: float = 30.0
    #: How long one driver call waits for the engine (clone, disk resize, shutdown, removal)
    #: before it returns or raises a retryable error; the next call resumes where it stopped.
    wait_timeout_s: float = 300.0
    #: How often a waiting driver call polls the engine.
    poll_interval_s: float = 2.0
    #: How long a graceful shutdown may take before a deleted VM is powered off.
    shutdown_timeout_s: float = 60.0

    def password_value(self) -> str:
        if self.password_file is not None:
            return self.password_file.read_text().strip()
        return self.password.get_secret_value() if self.password is not None else ""


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


class DiscoverySettings(BaseModel):
    """The cloud data discoverer (Deckhouse ``cloud-data-discoverer``)."""

    enabled: bool = True
    #: Seconds between discovery passes.
    interval_s: float = 3600.0
    #: Namespace of the discovery-data Secret, the conditions ConfigMap and the input Secret.
    namespace: str = "kube-system"


#: aws-node-termination-handler's default ``--webhook-template``.
NTH_WEBHOOK_TEMPLATE = (
    '{"text":"[NTH][Instance Interruption] EventID: {{ .EventID }} - Kind: {{ .Kind }} - '
    "Instance: {{ .InstanceID }} - Node: {{ .NodeName }} - Description: {{ .Description }} - "
    'Start Time: {{ .StartTime }}"}'
)


class NthSettings(BaseModel):
    """AWS node termination handler, queue-processor mode; names follow the upstream flags."""

    #: ``--queue-url``: the SQS queue EventBridge (or ASG notifications) feed; empty turns NTH off.
    queue_url: str = ""
    #: ``--sqs-msg-visibility-timeout-sec``; held messages are extended every half of it.
    visibility_timeout_s: int = Field(default=20, ge=1, le=43200)
    #: SQS long poll (``WaitTimeSeconds``, at most 20) and batch size (at most 10).
    wait_time_s: int = Field(default=20, ge=0, le=20)
    max_messages: int = Field(default=10, ge=1, le=10)
    #: Messages held while their workflows run; no new message is received beyond it.
    max_in_flight_messages: int = 500
    #: Auto Scaling endpoint (lifecycle actions); ``aws.endpoint_url`` when unset.
    autoscaling_endpoint_url: str | None = None
    #: ``--managed-tag`` and ``--check-tag-before-draining``.
    managed_tag: str = "aws-node-termination-handler/managed"
    check_tag_before_draining: bool = True
    #: ``--delete-sqs-msg-if-node-not-found``: unknown instances and missing Nodes too.
    delete_message_if_node_not_found: bool = True
    #: ``--use-provider-id``: find the Node by ``spec.providerID`` instead of its name.
    use_provider_id: bool = False
    #: ``--node-termination-grace-period``: the drain starts this long before the event's start
    #: time and must finish within it (the global drain timeout).
    node_termination_grace_period_s: float = 120.0
    #: ``--pod-termination-grace-period``: -1 uses each pod's own grace period.
    pod_termination_grace_period_s: int = -1
    #: ``--ignore-daemon-sets``, ``--delete-local-data``, and force for unmanaged pods.
    ignore_daemonsets: bool = True
    delete_emptydir_data: bool = True
    force: bool = True
    #: ``--enable-rebalance-draining`` (otherwise rebalance recommendations only cordon).
    enable_rebalance_draining: bool = False
    #: ``--cordon-only``.
    cordon_only: bool = False
    #: ``--taint-effect``.
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    #: ``--heartbeat-interval`` / ``--heartbeat-until`` for ASG lifecycle actions (0: none).
    heartbeat_interval_s: float = Field(default=60.0, ge=0)
    heartbeat_until_s: float = Field(default=172800.0, ge=0)
    #: A pod whose eviction a PDB refused (429) is tried again after this long, or sooner once
    #: its PDB reports ``disruptionsAllowed`` > 0 (kubectl drain's ``EvictErrorRetryDelay``).
    eviction_retry_interval_s: float = Field(default=5.0, gt=0)
    #: How often the drain re-lists the node's pods (deletion wait) and the blocking PDBs.
    drain_poll_interval_s: float = Field(default=0.25, gt=0)
    #: Length of one eviction activity; each round is one entry in the workflow history.
    drain_round_s: float = Field(default=30.0, gt=0)
    #: Heartbeat timeout of the drain's long activities: how soon a dead worker's work moves on.
    activity_heartbeat_timeout_s: float = Field(default=30.0, gt=0)
    #: Wait for the node's VolumeAttachments to go before completing the lifecycle action.
    wait_for_volume_attachments: bool = False
    volume_attachment_timeout_s: float = 300.0
    #: ``--webhook-url`` / ``--webhook-headers`` (JSON object) / ``--webhook-template[-file]``.
    webhook_url: SecretStr | None = None
    webhook_headers: SecretStr = SecretStr('{"Content-type":"application/json"}')
    webhook_template: str = NTH_WEBHOOK_TEMPLATE
    webhook_template_file: Path | None = None
    #: How often the starter refreshes the ``nth_tagged_nodes``/``nth_tagged_instances`` gauges.
    tagged_metrics_interval_s: float = 60.0


class DvpSettings(BaseModel):
    """The parent DVP cluster the DVP driver creates VMs in (Deckhouse ``dvp-common/config``).

    The defaults read Deckhouse's own variables (``DVP_KUBERNETES_CONFIG_BASE64``,
    ``DVP_NAMESPACE``, ``CLUSTER_UUID``); ``CLOUDLOOP_DVP__*`` wins over them.
    """

    #: A kubeconfig file for the parent cluster, or the same kubeconfig base64-encoded.
    kubeconfig: Path | None = None
    kubeconfig_base64: SecretStr | None = Field(
        default_factory=lambda: (
            SecretStr(os.environ["DVP_KUBERNETES_CONFIG_BASE64"])
            if os.environ.get("DVP_KUBERNETES_CONFIG_BASE64")
            else None
        )
    )
    #: The parent namespace every VM, disk and cloud-init Secret of this cluster lives in.
    namespace: str = Field(default_factory=lambda: os.environ.get("DVP_NAMESPACE", ""))
    #: Labels every VM and disk (``dvp.deckhouse.io/cluster-uuid``): this cluster's objects.
    cluster_uuid: str = Field(default_factory=lambda: os.environ.get("CLUSTER_UUID", ""))
    #: Per-request timeout towards the parent API server.
    timeout_s: float = 10.0
    #: Zones announced to the node manager (DVP has none of its own: ``["default"]``).
    zones: list[str] = Field(default_factory=list)
    #: Extra labels for every VM (``DVPClusterConfiguration.provider.additionalVMLabels``).
    additional_vm_labels: dict[str, str] = Field(default_factory=dict)
    #: ``sshPublicKey`` of the registration Secret.
    ssh_public_key: str = ""


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
    #: Serve ``/metrics`` only to bearer tokens allowed ``get`` on it (TokenReview + SAR).
    metrics_authorization: bool = False
    temporal: TemporalSettings = TemporalSettings()
    aws: AwsSettings = AwsSettings()
    zvirt: ZvirtSettings = ZvirtSettings()
    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    ccm: CcmSettings = CcmSettings()
    discovery: DiscoverySettings = DiscoverySettings()
    nth: NthSettings = NthSettings()
    dvp: DvpSettings = Field(default_factory=DvpSettings)

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
