"""The project's Prometheus metrics and the one HTTP endpoint serving them with health checks.

``/metrics`` serves this process's registry followed by the Temporal SDK runtime's metrics
(fetched from the runtime's own loopback exporter), so one scrape sees both. ``/healthz`` is
liveness and ``/readyz`` readiness, both from the process's :class:`~cloudloop.health.Health`
checks (crash-looping tasks, the leader Lease, stale informers); a failing probe answers 503 with
the reasons, one a line.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Callable

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest

from cloudloop.health import Health
from cloudloop.http_server import QuietHandler, ThreadedServer

CLOUD_API_REQUESTS = Counter(
    "cloud_api_requests",
    "Cloud API requests made by cloudloop, by provider, operation and outcome.",
    ["provider", "operation", "outcome"],
)
#: Upstream cloud-provider-aws's ``cloudprovider_aws_api_request_duration_seconds``, any cloud.
CLOUD_API_DURATION = Histogram(
    "cloud_api_request_duration_seconds",
    "Time spent in cloud API requests made by cloudloop, by provider and operation.",
    ["provider", "operation"],
)

WORKFLOWS_STARTED = Counter(
    "cloudloop_workflows_started",
    "Workflows started by starters (a start that joined a running workflow is not counted).",
    ["workflow"],
)

WORKFLOW_SIGNALS = Counter(
    "cloudloop_workflow_signals",
    "Signals starters sent to workflows (with signal-with-start), by workflow and signal.",
    ["workflow", "signal"],
)

# -- the starters' work queues (upstream client-go workqueue names) ---------------------------
WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Keys waiting in a starter's work queue.", ["name"])
WORKQUEUE_ADDS = Counter("workqueue_adds", "Keys added to a starter's work queue.", ["name"])
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries", "Keys queued again after a failed reconcile (with backoff).", ["name"]
)

#: Upstream component-base's name: 1 while this process holds the Lease ``name``.
LEADER = Gauge(
    "leader_election_master_status",
    "1 while this process is the leader of the Lease (the starter's), else 0.",
    ["name"],
)

# -- the in-cluster layout converge (names and labels as Deckhouse's terraform-state-exporter) --
CONVERGE_CLUSTER_STATUS = Gauge(
    "candi_converge_cluster_status",
    "1 for the base infrastructure's status in the last converge pass (one-hot).",
    ["status"],
)
CONVERGE_NODE_STATUS = Gauge(
    "candi_converge_node_status",
    "1 for each node's status in the last converge pass (one-hot per node).",
    ["node_group", "name", "status"],
)
CONVERGE_RESOURCES = Gauge(
    "cloudloop_layout_converge_resources",
    "Resources the last converge pass found to create, change in place or replace, per module.",
    ["module", "action"],
)
CONVERGE_HELD_STEPS = Gauge(
    "cloudloop_layout_converge_held_steps",
    "Destructive steps of the last converge pass waiting for (or held without) approval.",
)
CONVERGE_LAST_SUCCESS = Gauge(
    "cloudloop_layout_converge_last_success_timestamp_seconds",
    "When the last converge pass that could read the cloud started (Unix time).",
)

# -- cloud data discoverer (names and labels as Deckhouse's cloud-data-discoverer) ----------
DISCOVERY_CLOUD_REQUEST_ERROR = Gauge(
    "cloud_data_discovery_cloud_request_error",
    "1 when the last discovery request of this type to the cloud failed.",
    ["type"],  # instance_types | discovery_data | disks_meta
)
DISCOVERY_UPDATE_RESOURCE_ERROR = Gauge(
    "cloud_data_discovery_update_resource_error",
    "1 when the last discovery pass could not write one of its Kubernetes resources.",
)
DISCOVERY_ORPHANED_DISK = Gauge(
    "cloud_data_discovery_orphaned_disk_info",
    "A disk tagged for the cluster that no PersistentVolume references.",
    ["id", "name"],
)
DISCOVERY_CONDITIONS_ERROR = Gauge(
    "cloud_data_discovery_cloud_conditions_error",
    "A cloud condition that is not OK (see ConfigMap d8-cloud-provider-conditions).",
    ["name", "message"],
)

# -- AWS node termination handler: upstream names; Prometheus label names cannot hold '/', so
# upstream's ``node/action``, ``node/status`` and ``event/error/where`` become ``node_action``,
# ``node_status`` and ``event_error_where``. Counters are exposed with the ``_total`` suffix.
NTH_ACTIONS = Counter(
    "actions",
    "Node actions of the termination handler (cordon, cordon-and-drain, post-drain, ...).",
    ["node_action", "node_status"],  # node_status: success | error
)
NTH_EVENTS_ERROR = Counter(
    "events_error",
    "Errors while processing interruption events, by where they happened.",
    ["event_error_where"],
)
NTH_TAGGED_NODES = Gauge(
    "nth_tagged_nodes", "Nodes in the cluster whose instance carries the managed tag."
)
NTH_TAGGED_INSTANCES = Gauge("nth_tagged_instances", "Instances that carry the managed tag.")
NTH_EVICTIONS = Counter(
    "nth_evictions",
    "Eviction requests of node drains, by outcome.",
    ["outcome"],  # evicted | blocked | gone | error
)
NTH_DRAIN_BLOCKED_PODS = Gauge(
    "nth_drain_blocked_pods",
    "Pods of a node being drained whose eviction a PodDisruptionBudget currently refuses.",
    ["node"],
)
NTH_SQS_MESSAGES = Counter(
    "nth_sqs_messages",
    "SQS messages handled by the queue processor, by fate.",
    ["outcome"],  # deleted | skipped | ignored | malformed | left
)


# -- robustness ------------------------------------------------------------------------------
STARTER_RESTARTS = Counter(
    "cloudloop_starter_restarts",
    "Long-lived starter tasks restarted after they failed or ended unexpectedly.",
    ["starter"],
)
POISON_MESSAGES = Counter(
    "nth_sqs_poison_messages",
    "SQS messages given up on (received too often, or failed for good) and deleted.",
    ["reason"],  # max-receives | non-retryable
)


#: Judges a scrape's ``Authorization`` header: 200 serves ``/metrics``, else 401 or 403.
MetricsGuard = Callable[[str | None], int]
_metrics_guard: MetricsGuard | None = None


def require_metrics_authorization(guard: MetricsGuard | None) -> None:
    """From now on serve ``/metrics`` only when ``guard`` allows (``None``: open again).

    Process-wide, so it covers a server started earlier as well as later ones; see
    :class:`cloudloop.metrics_auth.MetricsAuthorizer` (TokenReview + SubjectAccessReview).
    """
    global _metrics_guard
    _metrics_guard = guard


class MetricsServer(ThreadedServer):
    """A small threaded HTTP server for ``/metrics``, ``/healthz`` and ``/readyz``."""

    def __init__(
        self,
        bind: str,
        port: int,
        *,
        temporal_metrics_url: str | None = None,
        health: Health | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``tls`` serves HTTPS only (with ``/metrics`` authorization on)."""
        self.health = health or Health()
        temporal_url = temporal_metrics_url
        checks = self.health

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if self.path in ("/healthz", "/readyz"):
                    reasons = checks.live() if self.path == "/healthz" else checks.ready()
                    text = "".join(f"{r}\n" for r in reasons) or "ok\n"
                    self._send(503 if reasons else 200, text.encode(), "text/plain")
                elif self.path == "/metrics":
                    guard = _metrics_guard
                    verdict = guard(self.headers.get("Authorization")) if guard else 200
                    if verdict != 200:
                        reason = b"Unauthorized\n" if verdict == 401 else b"Forbidden\n"
                        self._send(verdict, reason, "text/plain")
                        return
                    body = generate_latest(REGISTRY)
                    if temporal_url:
                        try:
                            with urllib.request.urlopen(temporal_url, timeout=2) as response:
                                body += response.read()
                        except OSError:
                            pass
                    self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler, bind, port, tls=tls, thread_name="metrics")

    def set_ready(self) -> None:
        self.health.set_started()
