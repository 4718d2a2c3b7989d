"""The DVP section of the settings (``CLOUDLOOP_DVP__*``): the parent cluster and its namespace.

Defaults read Deckhouse's own variables (``DVP_KUBERNETES_CONFIG_BASE64``, ``DVP_NAMESPACE``,
``CLUSTER_UUID``); the parent kubeconfig is a file or a SecretStr and never prints.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class DvpSettings(BaseModel):
    """The parent DVP cluster the DVP driver creates VMs in (Deckhouse ``dvp-common/config``).

    The defaults read Deckhouse's own variables (``DVP_KUBERNETES_CONFIG_BASE64``,
    ``DVP_NAMESPACE``, ``CLUSTER_UUID``); ``CLOUDLOOP_DVP__*`` wins over them.
    """

    #: a refused setting is named, never printed (its value may be a credential)
    model_config = ConfigDict(hide_input_in_errors=True)

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
    #: How long one ensure waits for the parent cluster to give a load balancer its address
    #: before it returns a retryable error (Deckhouse polls up to 5 minutes).
    lb_ingress_timeout_s: float = 60.0
