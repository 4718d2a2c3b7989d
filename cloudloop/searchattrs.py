"""Search attributes every cloudloop workflow carries; the Temporal UI finds objects by them.

Query example: ``temporal workflow list --query "CloudloopKind='Service' AND CloudloopName='web'"``.
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

CLUSTER = SearchAttributeKey.for_keyword("CloudloopCluster")
PROVIDER = SearchAttributeKey.for_keyword("CloudloopProvider")
KIND = SearchAttributeKey.for_keyword("CloudloopKind")
NAMESPACE = SearchAttributeKey.for_keyword("CloudloopNamespace")
NAME = SearchAttributeKey.for_keyword("CloudloopName")
#: The UID of the ``kube-system`` Namespace of the cluster a task-queue claim names.
CLUSTER_UID = SearchAttributeKey.for_keyword("CloudloopClusterUid")

#: Names registered with the server (all are Keyword attributes).
KEYWORDS = tuple(key.name for key in (CLUSTER, PROVIDER, KIND, NAMESPACE, NAME, CLUSTER_UID))


def for_object(
    *, cluster: str, provider: str, kind: str, namespace: str, name: str
) -> TypedSearchAttributes:
    """The search attributes of a workflow acting for one Kubernetes object."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(CLUSTER, cluster),
            SearchAttributePair(PROVIDER, provider),
            SearchAttributePair(KIND, kind),
            SearchAttributePair(NAMESPACE, namespace),
            SearchAttributePair(NAME, name),
        ]
    )


def for_claim(
    *, cluster: str, cluster_uid: str, provider: str, queue: str
) -> TypedSearchAttributes:
    """The search attributes of a task queue's claim: the claiming cluster's identity."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(CLUSTER, cluster),
            SearchAttributePair(CLUSTER_UID, cluster_uid),
            SearchAttributePair(PROVIDER, provider),
            SearchAttributePair(KIND, "ClusterClaim"),
            SearchAttributePair(NAMESPACE, ""),
            SearchAttributePair(NAME, queue),
        ]
    )
