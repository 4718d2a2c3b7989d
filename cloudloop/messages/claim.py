"""The claim of a task queue by one cluster: its workflow's name, ID, input and signal.

A ``ClusterClaim`` workflow per task queue (``cloudloop-claim/<queue>``) records which cluster
serves that queue: its ``clusterName`` and the UID of its ``kube-system`` Namespace, both in
search attributes (plaintext, readable with the payload codec on). Workers and starters start it
(``USE_EXISTING``) or find it, and refuse to run when it names another cluster
(:mod:`cloudloop.claim`); ``cloudloop temporal release-claim`` terminates it.

Rules:
- The ID is the queue's only: whoever claims first holds it; a second cluster's start joins the
  running claim and reads the first one's identity from it.
- The claim is record-only: no activity, no cloud, no Kubernetes call; it never ends by
  itself. Terminated (released), the next worker or starter to start claims the queue anew.
"""

from __future__ import annotations

from pydantic import BaseModel

#: The workflow type (started by name: the claim module does not import workflows).
CLAIM_WORKFLOW = "ClusterClaim"
#: The search-attribute kind of a claim (``CloudloopKind='ClusterClaim'``).
CLAIM_KIND = "ClusterClaim"


class ClaimInput(BaseModel):
    """Who claims ``queue``: the cluster's name and its ``kube-system`` Namespace UID."""

    queue: str
    cluster: str
    cluster_uid: str


def claim_workflow_id(queue: str) -> str:
    """``cloudloop-claim/<queue>``: one claim per task queue, whatever cluster makes it."""
    return f"cloudloop-claim/{queue}"
