"""Models, signal and activity names of the load-balancer entity workflow (one per Service).

The starter sends a :class:`DesiredLoadBalancer` (ports, annotations, node set) with the
``apply`` signal and asks for the teardown with ``tear_down``; the workflow keeps its whole state
in :class:`LoadBalancerState`, which is also what continue-as-new carries to the next run.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from cloudloop.cloud.models import LoadBalancerPort, LoadBalancerStatus
from cloudloop.kube.models import LoadBalancerNode as LoadBalancerNode
from cloudloop.kube.models import NodeSetRef as NodeSetRef
from cloudloop.kube.resources import ObjectRef

#: The upstream cleanup finalizer: added before any cloud resource exists, removed after delete.
LB_FINALIZER = "service.kubernetes.io/load-balancer-cleanup"


class LoadBalancerActivity:
    #: Ensure the cloud LB, then patch ``status.loadBalancer`` if the ingress changed.
    ENSURE = "lb.ensure"
    #: Register/deregister the backends only (a node-set change).
    UPDATE_BACKENDS = "lb.update_backends"
    #: Whether the cloud LB exists (decides the ``DeletingLoadBalancer`` Event); runs only in
    #: tear-downs begun before the ``lb-delete-one-activity`` patch (``lb.delete`` looks up since).
    GET = "lb.get"
    #: Delete every cloud resource, clear the status and remove the finalizer.
    DELETE = "lb.delete"
    #: Compare the cloud LB with the last applied state; repair it (and the ingress) on drift.
    RESYNC = "lb.resync"


class LoadBalancerSignal:
    APPLY = "apply"
    TEAR_DOWN = "tear_down"


class LoadBalancerQuery:
    STATE = "state"
    #: What the workflow is doing, as JSON for people (phase, nodes, ingress, last error).
    DESCRIBE = "describe"


def workflow_id(service: ObjectRef) -> str:
    """``lb/<namespace>/<name>/<uid>``: a recreated Service (new UID) gets a new workflow."""
    return f"lb/{service.namespace}/{service.name}/{service.uid}"


def default_load_balancer_name(uid: str) -> str:
    """Upstream ``DefaultLoadBalancerName``: ``"a"`` + the UID without dashes, 32 characters."""
    return ("a" + uid.replace("-", ""))[:32]


class DesiredLoadBalancer(BaseModel):
    """What the Service asks for: everything that changes the cloud LB, and the node set.

    The node set is either inline (``nodes``) or, beyond a size limit, ``node_set``.
    """

    ports: list[LoadBalancerPort]
    annotations: dict[str, str] = Field(default_factory=dict)
    source_ranges: list[str] = Field(default_factory=list)
    external_traffic_policy: str = "Cluster"
    health_check_node_port: int = 0
    #: ``spec.loadBalancerIP`` (deprecated upstream, still read by OCCM: a pre-allocated
    #: floating IP, or the VIP of an internal LB); empty when not set.
    load_balancer_ip: str = ""
    nodes: list[LoadBalancerNode] = Field(default_factory=list)
    node_set: NodeSetRef | None = None

    @property
    def node_count(self) -> int:
        return self.node_set.count if self.node_set is not None else len(self.nodes)

    def same_config(self, other: DesiredLoadBalancer | None) -> bool:
        """Equal apart from the node set (a node-set change only updates the backends)."""
        apart = {"nodes", "node_set"}
        return other is not None and self.model_dump(exclude=apart) == other.model_dump(
            exclude=apart
        )


class ApplyRequest(BaseModel):
    """The ``apply`` signal: the desired state, and the ingress the Service showed then."""

    desired: DesiredLoadBalancer
    observed_ingress: list[str] = Field(default_factory=list)
    #: The drift check's period (``None``: leave the workflow's as it is; 0: no checks).
    resync_period_s: float | None = None


class LoadBalancerTarget(BaseModel):
    """Which Service, cluster and cloud one workflow acts for."""

    service: ObjectRef
    cluster: str
    provider: str

    @property
    def name(self) -> str:
        return default_load_balancer_name(self.service.uid)


class LoadBalancerState(BaseModel):
    """The workflow's input and its whole state (carried over by continue-as-new)."""

    target: LoadBalancerTarget
    desired: DesiredLoadBalancer | None = None
    tear_down: bool = False
    #: The last desired state the cloud LB was made to match.
    applied: DesiredLoadBalancer | None = None
    #: The last desired state the cloud refused as invalid (not retried until it changes).
    rejected: DesiredLoadBalancer | None = None
    #: Hostnames in ``status.loadBalancer.ingress`` as last written or seen; None: not known yet.
    ingress: list[str] | None = None
    #: The finalizer was removed by a teardown; a later ``apply`` must add it back first.
    finalizer_removed: bool = False
    #: Continue-as-new after this many history events (0: when the server suggests it).
    history_limit: int = 0
    #: Seconds between drift checks of the applied LB while nothing else happens (0: none).
    resync_period_s: float = 0.0
    # -- retry state carried over by continue-as-new (a failing LB keeps its backoff) ----------
    #: Reconciles that failed in a row (the backoff's exponent).
    failures: int = 0
    #: The last reconcile failed and waits for its backoff (or a new desired state).
    retry_pending: bool = False


class EnsureLoadBalancerInput(BaseModel):
    target: LoadBalancerTarget
    desired: DesiredLoadBalancer
    current_ingress: list[str] = Field(default_factory=list)
    add_finalizer: bool = False


class EnsureLoadBalancerResult(BaseModel):
    status: LoadBalancerStatus | None = None
    ingress: list[str] = Field(default_factory=list)
    service_gone: bool = False


class UpdateBackendsInput(BaseModel):
    target: LoadBalancerTarget
    desired: DesiredLoadBalancer


class ResyncLoadBalancerInput(BaseModel):
    target: LoadBalancerTarget
    desired: DesiredLoadBalancer
    current_ingress: list[str] = Field(default_factory=list)


class ResyncLoadBalancerResult(BaseModel):
    """What drifted and was put back (empty: the cloud matched), and the ingress after."""

    repaired: list[str] = Field(default_factory=list)
    ingress: list[str] = Field(default_factory=list)
    service_gone: bool = False


class LoadBalancerLookup(BaseModel):
    target: LoadBalancerTarget


class LoadBalancerFound(BaseModel):
    exists: bool
    hostname: str = ""


class DeleteLoadBalancerInput(BaseModel):
    target: LoadBalancerTarget
    #: Look the LB up first and record ``DeletingLoadBalancer`` when it exists (first attempt
    #: only), in the same activity: what ``lb.get`` and an Event activity did before it
    #: (``lb-delete-one-activity`` patch). False: the workflow did both itself.
    announce: bool = False


class LoadBalancerResult(BaseModel):
    """What a finished workflow reports: the LB and the finalizer are gone."""

    deleted: bool = True
