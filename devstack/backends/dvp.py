"""DVP on the parent cluster (its own kube-apiserver with the virtualization CRDs and the
simulator standing in for DVP's controllers): the driver's settings for a parent namespace, and
node VMs made directly in the parent (what a node group would have made).

Rules: each user takes a parent namespace of its own (``DvpParent.new_namespace``) and, unless it
shares a worker's, a fresh cluster UUID, so scenarios never see each other's VMs.
"""

from __future__ import annotations

import uuid
from typing import Any

from cloudloop.cloud.dvp import resources as dvp
from cloudloop.cloud.dvp.settings import DvpSettings
from devstack.dvp_simulator import CLUSTER_IMAGE, VM_CLASS, DvpParent


def dvp_settings(parent: DvpParent, namespace: str, **overrides: Any) -> DvpSettings:
    """The driver's settings for ``namespace`` of the parent cluster (a fresh cluster UUID unless
    ``cluster_uuid`` is given); ``overrides`` set any other field."""
    values: dict[str, Any] = {
        "kubeconfig": parent.kubeconfig,
        "kubeconfig_base64": None,  # never Deckhouse's variable from the environment
        "namespace": namespace,
        "cluster_uuid": str(uuid.uuid4()),
    }
    values.update(overrides)
    return DvpSettings(**values)


def create_node_vms(
    parent: DvpParent, namespace: str, labels: dict[str, str], names: list[str]
) -> None:
    """One small VirtualMachine per name from the parent's cluster image, labelled ``labels``
    (the driver's cluster labels) and its hostname; the simulator runs them and gives them IPs."""
    for name in names:
        parent.kube.create(
            dvp.VIRTUAL_MACHINES,
            {
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {**labels, dvp.HOSTNAME_LABEL: name},
                },
                "spec": {
                    "virtualMachineClassName": VM_CLASS,
                    "cpu": {"cores": 1},
                    "memory": {"size": "1Gi"},
                    "blockDeviceRefs": [{"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE}],
                },
            },
            namespace,
        )
