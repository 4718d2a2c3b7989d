"""Pure data of the Kubernetes layer that messages carry too: Event sources and LB node sets.

:class:`EventSource` names the reporting controller of an Event (:mod:`cloudloop.kube.events`);
:class:`LoadBalancerNode` and :class:`NodeSetRef` are what a load balancer's node set is made of
and where a large one is kept (:mod:`cloudloop.kube.nodesets`). The Kubernetes layer owns them;
:mod:`cloudloop.messages.kube` and :mod:`cloudloop.messages.loadbalancer` re-export them.

Rules: pure data (pydantic and the standard library); no I/O, no import of the rest of cloudloop.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class EventSource:
    """Reporting controller names of Events (``source.component``): upstream's for the CCM's
    controllers (kubernetes/cloud-provider), cloudloop's own for the rest."""

    NODE = "cloud-node-controller"
    NODE_LIFECYCLE = "cloud-node-lifecycle-controller"
    SERVICE = "service-controller"
    ROUTE = "route-controller"
    MACHINE = "cloudloop-machine-controller"
    TERMINATION = "cloudloop-termination-handler"
    PROBE = "cloudloop"


class LoadBalancerNode(BaseModel):
    """A node that may back the LB (upstream exclusions applied, providerID set), with only the
    labels the cloud selects backends by (``target-node-labels``, a node selector)."""

    name: str
    provider_id: str
    labels: dict[str, str] = Field(default_factory=dict)


class NodeSetRef(BaseModel):
    """A node set too large to send inline: the ConfigMap the starter writes before it signals.

    ``digest`` identifies the node set (with this Service's labels) the signal was made for, so a
    changed set is a changed desired state; the activity reads the ConfigMap's current set, which
    is never older (see :mod:`cloudloop.kube.nodesets`).
    """

    namespace: str
    name: str
    digest: str
    count: int
