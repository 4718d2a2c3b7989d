"""AWS cluster ownership tags: which route tables and volumes belong to a cluster.

A resource belongs to cluster ``<c>`` when it carries the tag key ``kubernetes.io/cluster/<c>``
(any value) or the legacy tag ``KubernetesCluster=<c>``, as in cloud-provider-aws.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef

CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
LEGACY_CLUSTER_TAG = "KubernetesCluster"


def cluster_tag_key(cluster: str) -> str:
    return f"{CLUSTER_TAG_PREFIX}{cluster}"


def cluster_tag_filters(cluster: str) -> list[list[FilterTypeDef]]:
    """EC2 filter sets for the current tag style, then the legacy one.

    Two sets rather than one ``tag-key`` filter with both keys: an ORed multi-value tag filter
    is what AWS documents, but emulators (moto) match it as a set comparison instead.
    """
    return [
        [{"Name": "tag-key", "Values": [cluster_tag_key(cluster)]}],
        [{"Name": f"tag:{LEGACY_CLUSTER_TAG}", "Values": [cluster]}],
    ]


def tag_dict(tags: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in tags or []}


def tagged_for_cluster(tags: Mapping[str, str], cluster: str) -> bool:
    return cluster_tag_key(cluster) in tags or tags.get(LEGACY_CLUSTER_TAG) == cluster
