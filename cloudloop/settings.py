"""Process settings from environment (``CLOUDLOOP_*``, nested with ``__``) and a YAML file.

The YAML file is named by ``CLOUDLOOP_CONFIG``; environment values win over it. This module
holds the core sections only and imports nothing of the product (an import-linter contract);
the registry (:mod:`cloudloop.cloud.registry`) composes :class:`CoreSettings` with one section
per provider (``CLOUDLOOP_AWS__*``, ...) into ``Settings``, read through each provider record.

Rules:
- Secrets are read from files or typed as :class:`pydantic.SecretStr`, so they never print in
  logs, reprs or workflow history; a refused setting's error names it, never its value
  (``hide_input_in_errors``; validators word their messages without the value).
- ``provider`` must name a registered provider; an unknown one fails at start, loudly (checked
  by the composed ``Settings``).
- Code outside a provider's package reads its section only as ``record.section(settings)``.
- One cluster, one set of queues: the general task queue derives from ``cluster_name``
  (:func:`derived_task_queue`) unless ``temporal.task_queue`` is set; every queue name and
  workflow-ID scope is derived here only (:meth:`TemporalSettings.queue_for`,
  :attr:`TemporalSettings.id_scope`; the IDs themselves are built by
  :func:`cloudloop.messages.scope.scoped_id`), so a fleet of clusters reuses one derivation.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)


class TemporalTlsSettings(BaseModel):
    """TLS towards the Temporal frontend; files come from a mounted Secret."""

    enabled: bool = False
    cert_file: Path | None = None
    key_file: Path | None = None
    #: Server CA; the system trust store when unset or missing.
    ca_file: Path | None = None


#: The general task queue of every install made before queues derived from ``cluster_name``
#: (its long-lived workflows run there; see docs/decisions/0039-one-cluster-one-queue-set.md).
LEGACY_TASK_QUEUE = "cloudloop"
#: What a derived general queue starts with: ``cloudloop-<cluster_name>``.
TASK_QUEUE_PREFIX = "cloudloop-"
#: A cluster name: a DNS-label-like word (it is a queue component, a tag value and part of
#: cloud resource names). Upper case, dots and underscores are kept for existing installs.
CLUSTER_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
#: A task queue the settings accept: printable, no blank, no ``/`` (workflow IDs are scoped by
#: it with ``/``), not Temporal's reserved ``/_sys/``; short enough for ``-<domain>``.
TASK_QUEUE = re.compile(r"[A-Za-z0-9._:-]{1,200}")


def derived_task_queue(cluster_name: str) -> str:
    """The general task queue of ``cluster_name`` when none is configured."""
    return f"{TASK_QUEUE_PREFIX}{cluster_name}"


class Domain:
    """The work domains with a task queue of their own (``<task_queue>-<domain>``)."""

    LOAD_BALANCER = "loadbalancer"
    MACHINE = "machine"
    VOLUME = "volume"
    DRAIN = "drain"
    ALL = (LOAD_BALANCER, MACHINE, VOLUME, DRAIN)


class TaskQueueSettings(BaseModel):
    """One domain's task queue: its workers' activity slots and its activity rate."""

    #: Activities one worker runs at once on this queue.
    max_concurrent_activities: int = Field(default=50, ge=1)
    #: Activities started per second on this queue across all workers (the server enforces
    #: it; None: unlimited), so one domain's storm cannot flood the cloud API for the others.
    activities_per_second: float | None = Field(default=50.0, gt=0)


class CodecSettings(BaseModel):
    """The payload codec (AES-256-GCM) every process that talks to Temporal encrypts with.

    Keys come from ``key_dir`` (a mounted Secret): one file a key, named by its id (letters,
    digits, ``.``, ``_``, ``-``), holding 32 random bytes in base64 (``openssl rand -base64 32``).
    """

    #: On by default: a process with the codec on and no key refuses to start. Off only where
    #: histories may hold the cluster's data in plaintext (never with a shared Temporal).
    enabled: bool = True
    key_dir: Path | None = None
    #: The key new payloads are encrypted with; empty: the only key of ``key_dir``. The others
    #: still decrypt what they encrypted (rotation: add a key, make it active, keep the old).
    active_key_id: str = ""


class CodecServerSettings(BaseModel):
    """``cloudloop codec-server``: Temporal's codec endpoint for the Temporal UI and CLI."""

    bind: str = "0.0.0.0"
    port: int = Field(default=8888, ge=0, le=65535)
    #: Origins allowed by CORS (the Temporal UI's, e.g. ``https://temporal.example.com``).
    cors_origins: list[str] = Field(default_factory=list)
    #: Bearer tokens accepted, one a line (a mounted Secret file), compared in constant time.
    tokens_file: Path | None = None
    #: Also accept Kubernetes tokens allowed ``post`` on the non-resource URL
    #: ``/cloudloop/codec`` (TokenReview + SubjectAccessReview, as ``metrics_authorization``).
    kubernetes_authorization: bool = False
    token_audiences: list[str] = Field(default_factory=list)
    #: Serve without any authorization check (a developer's loopback only).
    insecure_no_authorization: bool = False
    #: Largest request body read; larger ones get 413.
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    #: Seconds a connection may take to send its request.
    request_timeout_s: float = Field(default=10.0, gt=0)
    #: HTTPS from this pair (a kubernetes.io/tls Secret); plain HTTP when unset (behind an
    #: Ingress that terminates TLS).
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None


class TemporalSettings(BaseModel):
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    #: The general queue (cloud probes, and every workflow type for runs started before the
    #: domains had queues of their own); each domain's queue is ``<task_queue>-<domain>``.
    #: Empty: ``cloudloop-<cluster_name>`` (filled in by :class:`CoreSettings`); an install
    #: that ran before queues were derived keeps ``cloudloop`` (the chart pins it).
    task_queue: str = ""
    #: What workflow IDs that carry no Kubernetes UID are prefixed with (``<scope>/drain/...``),
    #: so two clusters on one namespace never share one. None: the general queue, but none on
    #: the legacy queue ``cloudloop`` (an existing install keeps its running workflows' IDs);
    #: "": none.
    workflow_id_scope: str | None = None
    #: Activity slots of the general queue's worker.
    max_concurrent_activities: int = Field(default=100, ge=1)
    #: Per-domain queue settings (keys: :class:`Domain` names).
    queues: dict[str, TaskQueueSettings] = Field(
        default_factory=lambda: {domain: TaskQueueSettings() for domain in Domain.ALL}
    )
    tls: TemporalTlsSettings = TemporalTlsSettings()
    api_key_file: Path | None = None
    #: Seconds a stopping worker waits for running activities before cancelling them.
    graceful_shutdown_s: float = 30.0
    #: Workers scale their task pollers with the backlog the server reports (Temporal's
    #: poller autoscaling) instead of keeping five per queue: a burst of new workflows is
    #: picked up in parallel rather than queueing behind one non-sticky poller.
    poller_autoscaling: bool = True
    #: Payload encryption (``CLOUDLOOP_TEMPORAL__CODEC__*``): see :class:`CodecSettings`.
    codec: CodecSettings = CodecSettings()

    @field_validator("task_queue")
    @classmethod
    def _task_queue_legal(cls, value: str) -> str:
        if value and not TASK_QUEUE.fullmatch(value):
            raise ValueError("task_queue: use 1-200 letters, digits, '.', '_', ':' or '-'")
        return value

    @field_validator("workflow_id_scope")
    @classmethod
    def _scope_legal(cls, value: str | None) -> str | None:
        if value and not TASK_QUEUE.fullmatch(value):
            raise ValueError("workflow_id_scope: use letters, digits, '.', '_', ':' or '-'")
        return value

    def queue_for(self, domain: str) -> str:
        """The task queue of ``domain`` (load balancers, machines, volumes, drains)."""
        return f"{self.task_queue}-{domain}"

    def all_queues(self) -> list[str]:
        """Every queue of this cluster's set: the general queue, then each domain's."""
        return [self.task_queue, *(self.queue_for(domain) for domain in Domain.ALL)]

    @property
    def id_scope(self) -> str:
        """The scope of this cluster's workflow IDs (see :attr:`workflow_id_scope`)."""
        if self.workflow_id_scope is not None:
            return self.workflow_id_scope
        return "" if self.task_queue == LEGACY_TASK_QUEUE else self.task_queue

    def queue_settings(self, domain: str) -> TaskQueueSettings:
        return self.queues.get(domain) or TaskQueueSettings()


class LeaderElectionSettings(BaseModel):
    enabled: bool = True
    namespace: str = Field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "kube-system"))
    name: str = "cloudloop-starter"
    #: Unique per process, as upstream's ``<hostname>_<uuid>``: two replicas on one host never
    #: share it, and a restarted process waits for its old Lease to expire like any other.
    identity: str = Field(
        default_factory=lambda: (
            f"{os.environ.get('POD_NAME') or os.uname().nodename}_{uuid.uuid4().hex[:8]}"
        )
    )
    lease_duration_s: int = 15
    renew_deadline_s: int = 10
    retry_period_s: int = 2


#: Bound of ``--concurrent-node-syncs`` and ``--concurrent-node-status-updates``: the starter's
#: API client keeps 32 connections (:func:`cloudloop.kube.client.api_client`), shared with its
#: watches, Events and other loops; more writers than that would open and drop connections, and
#: past 16 a local API server only answers each write later (bench/README.md, ``scale``).
MAX_CONCURRENT_NODE_SYNCS = 32


class CcmSettings(BaseModel):
    """Cloud-controller-manager behaviour; names and defaults follow the upstream flags."""

    #: ``--node-monitor-period``: how often the lifecycle pass checks NotReady nodes.
    node_monitor_period_s: float = 5.0
    #: ``--node-status-update-frequency``: address refresh of initialized nodes.
    node_status_update_frequency_s: float = 300.0
    #: ``--concurrent-node-syncs``: node initializations writing at once (each writes the
    #: Node's status, then the Node). Upstream's default, 1; at most
    #: :data:`MAX_CONCURRENT_NODE_SYNCS`. A burst of new nodes is bound by these writes: 16
    #: initializes 1,000 nodes fastest on the local stack (bench/README.md, ``scale``).
    concurrent_node_syncs: int = Field(default=1, ge=1, le=MAX_CONCURRENT_NODE_SYNCS)
    #: ``--concurrent-node-status-updates``: parallel address patches (0: concurrent_node_syncs).
    concurrent_node_status_updates: int = Field(default=0, ge=0, le=MAX_CONCURRENT_NODE_SYNCS)
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
    #: Drift repair (not upstream): each load balancer is compared with its Service this often
    #: while nothing else happens, and put back if it was changed by hand (0: never).
    load_balancer_resync_period_s: float = 600.0


class DiscoverySettings(BaseModel):
    """The cloud data discoverer (Deckhouse ``cloud-data-discoverer``)."""

    enabled: bool = True
    #: Seconds between discovery passes.
    interval_s: float = Field(default=3600.0, gt=0)
    #: Not upstream: a pass the cloud failed (a request error or timeout) is tried again this
    #: much later, doubling at each failed pass up to ``interval_s``, instead of leaving the
    #: catalog, the discovery data and the StorageClasses they feed unwritten until the next
    #: regular pass (an hour).
    retry_interval_s: float = Field(default=30.0, gt=0)
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

    #: ``--queue-url``: an SQS queue made by someone else. Empty (the default): the product makes
    #: and owns its queue (``manage_queue``), or, with ``manage_queue`` off, no queue mode.
    queue_url: str = ""
    #: Make the queue, its policy, the EventBridge rules (Spot interruption, rebalance, state
    #: change, scheduled change, ASG terminate lifecycle) and the lifecycle hooks (the
    #: ``TerminationQueue`` workflow, idempotent); ``cloudloop termination uninstall`` removes them.
    manage_queue: bool = True
    #: The managed queue's name (also the rules' prefix); empty: ``<cluster_name>-nth``.
    queue_name: str = ""
    #: Auto Scaling groups that get the terminate lifecycle hook ``lifecycle_hook_name``.
    lifecycle_hook_groups: list[str] = Field(default_factory=list)
    lifecycle_hook_name: str = "cloudloop-nth"
    lifecycle_hook_heartbeat_timeout_s: int = Field(default=300, ge=30, le=7200)
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
    #: How often the drain re-lists the node's pods (deletion wait) and the blocking PDBs; at
    #: least a second (kubectl drain's ``waitForDelete`` polls every second).
    drain_poll_interval_s: float = Field(default=1.0, ge=1.0)
    #: A message whose drain failed is deleted (one Warning on the Node, counted in
    #: ``nth_sqs_poison_messages_total``) once it was received this often; 0 leaves it to the
    #: queue's redrive policy (``maxReceiveCount`` to a dead-letter queue) instead.
    max_receive_count: int = Field(default=5, ge=0)
    #: Length of one eviction activity; each round is one entry in the workflow history.
    drain_round_s: float = Field(default=30.0, gt=0)
    #: Heartbeat timeout of the drain's long activities: how soon a dead worker's work moves on
    #: (at most 15 s, the rule of :mod:`workflows.timeouts`).
    activity_heartbeat_timeout_s: float = Field(default=15.0, gt=0)
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
    #: Instance-metadata mode (``cloudloop termination-imds``, a DaemonSet): this node's name,
    #: the metadata service (IMDSv2), each request's timeout and the poll period (upstream
    #: polls every 2 s).
    node_name: str = Field(default_factory=lambda: os.environ.get("NODE_NAME", ""))
    imds_endpoint: str = "http://169.254.169.254"
    imds_timeout_s: float = Field(default=2.0, gt=0)
    imds_poll_interval_s: float = Field(default=2.0, gt=0)


class ImdsAgentNthSettings(BaseModel):
    """The part of :class:`NthSettings` the IMDS node agent reads (the same names, so the same
    ``CLOUDLOOP_NTH__*`` variables)."""

    node_name: str = Field(default_factory=lambda: os.environ.get("NODE_NAME", ""))
    imds_endpoint: str = "http://169.254.169.254"
    imds_timeout_s: float = Field(default=2.0, gt=0)
    imds_poll_interval_s: float = Field(default=2.0, gt=0)


class ImdsAgentSettings(BaseSettings):
    """Everything the IMDS node agent (``cloudloop termination-imds``, on every node) reads: the
    cloud, the Kubernetes API (a kubeconfig, or the in-cluster ServiceAccount) and its node's
    metadata service. Nothing of Temporal, no cloud section, no credential file, and no
    ``CLOUDLOOP_CONFIG`` file: the chart gives it these variables alone."""

    model_config = SettingsConfigDict(
        env_prefix="CLOUDLOOP_",
        env_nested_delimiter="__",
        extra="ignore",
        hide_input_in_errors=True,
    )

    cluster_name: str = "cloudloop"
    #: The cloud (a registered provider's name; empty: the registry's default).
    provider: str = ""
    kubeconfig: Path | None = None
    nth: ImdsAgentNthSettings = Field(default_factory=ImdsAgentNthSettings)


class VolumeSnapshotClassSettings(BaseModel):
    """The driver's VolumeSnapshotClass, kept by the CSI controller beside the StorageClasses
    (from the same discovery document) where the cloud's driver has snapshots."""

    enabled: bool = False
    #: Its name ("": the CSI driver name).
    name: str = ""
    #: ``snapshot.storage.kubernetes.io/is-default-class``.
    default: bool = True
    #: Its parameters (EBS: ``tagSpecification_<n>: "key=value"``).
    parameters: dict[str, str] = Field(default_factory=dict)


class CsiSettings(BaseModel):
    """The CSI driver (``cloudloop csi-controller``, ``cloudloop csi-node``)."""

    #: The CSI driver name (``CSIDriver`` object, StorageClass ``provisioner``).
    driver_name: str = "csi.cloudloop.io"
    #: Where the gRPC service listens (``unix:///path``).
    endpoint: str = "unix:///csi/csi.sock"
    #: This node's Kubernetes name (the DaemonSet passes ``spec.nodeName``).
    node_name: str = Field(default_factory=lambda: os.environ.get("NODE_NAME", ""))
    #: The node's CSI node ID (the cloud's instance ID); from the Node's providerID when empty.
    node_id: str = ""
    #: The node's zone; from its ``topology.kubernetes.io/zone`` label when empty.
    zone: str = ""
    #: ``max_volumes_per_node`` (0: the cloud's default).
    max_volumes_per_node: int = 0
    #: ``block``: real devices, mkfs and mount; ``directory``: a folder per volume bind-mounted
    #: (for csi-sanity on machines without the attached disks).
    mounter: Literal["block", "directory"] = "block"
    #: Folders of the ``directory`` mounter.
    directory_root: Path = Path("/var/lib/cloudloop-csi/volumes")
    #: Where disks appear by serial (``/dev/disk/by-id``).
    device_dir: Path = Path("/dev/disk/by-id")
    #: How long NodeStage waits for the attached disk to appear.
    device_wait_s: float = 30.0
    default_fs_type: Literal["ext4", "xfs"] = "ext4"
    #: Reconcile the cloud's StorageClasses from the discovery data (leader-elected).
    storage_classes: bool = True
    #: The default StorageClass by name ("": the cloud's own default; "-": none).
    default_storage_class: str = ""
    #: Deckhouse's ``storageClass.exclude``: StorageClass names, or regular expressions matched
    #: anywhere in a name (``.*-hdd``), that are not made (and are removed if this driver made
    #: them); an excluded class is never the default.
    storage_class_exclude: list[str] = Field(default_factory=list)
    storage_class_interval_s: float = 60.0
    volume_snapshot_class: VolumeSnapshotClassSettings = Field(
        default_factory=VolumeSnapshotClassSettings
    )

    @field_validator("storage_class_exclude")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error:
                raise ValueError(f"entry {index} is not a regex") from None
        return patterns

    def excluded(self, storage_class: str) -> bool:
        """Whether ``storage_class`` matches one of :attr:`storage_class_exclude`."""
        return any(re.search(pattern, storage_class) for pattern in self.storage_class_exclude)


#: Where the chart mounts the layouts Secret into the worker pods (``layouts.mountPath``).
LAYOUTS_MOUNT = Path("/etc/cloudloop/layouts")


class LayoutConvergeSettings(BaseModel):
    """The in-cluster converge (terraform-manager's job): a Schedule's pass every
    ``interval_s``, exported by the starter from the status ConfigMap."""

    #: The starter exports the converge status (the chart installs the Schedule with it).
    enabled: bool = False
    #: Between two passes (upstream's ``autoConvergerPeriod``: 1 h).
    interval_s: float = Field(default=3600.0, ge=60)
    #: Apply creations and in-place repairs in the pass; destructive steps wait for approval.
    auto: bool = False
    #: How long a pass waits for a held step's approval.
    approval_wait_s: float = Field(default=3600.0, gt=0)
    #: How often the starter reads the status ConfigMap.
    export_interval_s: float = Field(default=30.0, gt=0)


class LayoutSettings(BaseModel):
    """The files the layout activities read (each cluster's ``<Provider>ClusterConfiguration``
    with its credentials, and destroy's kubeconfig): only under ``source_dir``."""

    #: The one directory layout inputs may name (a file's real path, symlinks and ``..``
    #: resolved, must lie inside it; a relative name is taken inside it).
    source_dir: Path = LAYOUTS_MOUNT
    #: A larger file is refused unread (a ClusterConfiguration is a few KiB).
    max_file_bytes: int = Field(default=1 << 20, ge=1)
    converge: LayoutConvergeSettings = Field(default_factory=LayoutConvergeSettings)


class CoreSettings(BaseSettings):
    """Everything a worker or starter process needs to know, but the providers' sections."""

    model_config = SettingsConfigDict(
        env_prefix="CLOUDLOOP_",
        env_nested_delimiter="__",
        extra="ignore",
        # a refused setting is named, never printed (a credential may be the refused value)
        hide_input_in_errors=True,
    )

    #: The cluster's name (tags, resource names, the derived task queue); see :data:`CLUSTER_NAME`.
    cluster_name: str = "cloudloop"
    #: The cluster's identity in its queue claims (:mod:`cloudloop.claim`); empty: the UID of
    #: the cluster's kube-system Namespace, read from its API server. Set it only for a worker
    #: whose cluster does not exist yet (the layouts that bootstrap it).
    cluster_uid: str = Field(default="", max_length=128)
    #: The cloud: a name in :data:`cloudloop.cloud.registry.PROVIDERS` (its default and the
    #: check that it is registered come with the composed ``Settings``).
    provider: str = ""
    #: Path of a kubeconfig; in-cluster config when unset and ``KUBECONFIG`` is unset too.
    kubeconfig: Path | None = None
    metrics_port: int = 9464
    metrics_bind: str = "0.0.0.0"
    #: Serve ``/metrics`` only to bearer tokens allowed ``get`` on it (TokenReview + SAR), over
    #: HTTPS: from ``metrics_tls_cert_file``/``metrics_tls_key_file``, else a self-signed pair.
    metrics_authorization: bool = False
    metrics_tls_cert_file: Path | None = None
    metrics_tls_key_file: Path | None = None
    #: Audiences the scrapers' tokens are reviewed for (empty: the API server's default).
    metrics_token_audiences: list[str] = Field(default_factory=list)
    temporal: TemporalSettings = TemporalSettings()
    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    ccm: CcmSettings = CcmSettings()
    discovery: DiscoverySettings = DiscoverySettings()
    nth: NthSettings = NthSettings()
    csi: CsiSettings = Field(default_factory=CsiSettings)
    layouts: LayoutSettings = Field(default_factory=LayoutSettings)
    codec_server: CodecServerSettings = Field(default_factory=CodecServerSettings)

    @field_validator("cluster_name")
    @classmethod
    def _cluster_name_legal(cls, value: str) -> str:
        if not CLUSTER_NAME.fullmatch(value):
            raise ValueError(
                "cluster_name: use 1-63 letters, digits, '.', '_' or '-', "
                "starting and ending with a letter or digit"
            )
        return value

    @model_validator(mode="after")
    def _derive_task_queue(self) -> CoreSettings:
        """An unset ``temporal.task_queue`` becomes ``cloudloop-<cluster_name>``."""
        if not self.temporal.task_queue:
            self.temporal = self.temporal.model_copy(
                update={"task_queue": derived_task_queue(self.cluster_name)}
            )
        return self

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
