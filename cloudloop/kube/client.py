"""Makes a kubernetes ``ApiClient`` from a kubeconfig path, ``KUBECONFIG`` or in-cluster config."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config


def api_client(kubeconfig: Path | str | None = None, *, qps_pool: int = 32) -> client.ApiClient:
    """A new API client; each call gets its own configuration (no global default is touched)."""
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        config.load_kube_config(config_file=str(path), client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = qps_pool
    return client.ApiClient(configuration)
