"""Load-balancer node sets too large for a workflow signal, kept in a ConfigMap (a claim check).
The starter writes it before it signals a digest; the ``lb.*`` activities read it back.
Sizes at 5,000 nodes, raw and compressed: ``bench/README.md`` (figures behind design choices).

Rules:
- Identity: one ConfigMap per cluster, ``<lease name>-lb-nodes`` in the starter's namespace (a
  fixed name, so RBAC can name it), labelled managed-by cloudloop. It holds the *current* LB node
  set with every node label some LB Service names (the union; each Service's signal carries the
  digest of its own projection, so a label only another Service names changes nothing for it).
- Idempotency: the starter writes only when the set changed (digest); the reader never writes.
- Crash behaviour: the starter writes before it signals, so the ConfigMap is never older than a
  signalled digest; a reader uses what it holds (the newest node set is what the cloud should get;
  the workflow receives that digest next). A missing ConfigMap fails the activity attempt, which
  the workflow retries with backoff; the starter writes it again at its next node change or start.
- Size: ``binaryData`` holds zlib-compressed JSON rows, under the 1 MiB object limit.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import zlib
from collections.abc import Sequence

from cloudloop.kube.api import Kube
from cloudloop.kube.models import LoadBalancerNode, NodeSetRef
from cloudloop.kube.resources import CONFIG_MAPS

DATA_KEY = "nodes.json.zlib"
DIGEST_ANNOTATION = "cloudloop.io/node-set-digest"
COUNT_ANNOTATION = "cloudloop.io/node-set-count"
CLUSTER_ANNOTATION = "cloudloop.io/cluster"
MANAGED_BY = {"app.kubernetes.io/managed-by": "cloudloop", "cloudloop.io/role": "lb-node-set"}


def canonical(nodes: Sequence[LoadBalancerNode]) -> bytes:
    """The node list as compact JSON rows ``[name, providerID, labels]`` (keys sorted)."""
    rows = [[n.name, n.provider_id, n.labels] for n in nodes]
    return json.dumps(rows, separators=(",", ":"), sort_keys=True).encode()


def digest(nodes: Sequence[LoadBalancerNode]) -> str:
    return hashlib.sha256(canonical(nodes)).hexdigest()


def configmap_name(cluster: str) -> str:
    """The name when none is given (benchmarks, tests: several clusters share one namespace)."""
    return f"cloudloop-lb-nodes-{hashlib.sha256(cluster.encode()).hexdigest()[:12]}"


def encode(nodes: Sequence[LoadBalancerNode]) -> str:
    return base64.b64encode(zlib.compress(canonical(nodes), 6)).decode()


def decode(data: str) -> list[LoadBalancerNode]:
    rows = json.loads(zlib.decompress(base64.b64decode(data)))
    return [LoadBalancerNode(name=r[0], provider_id=r[1], labels=r[2]) for r in rows]


def write_node_set(
    kube: Kube, namespace: str, name: str, nodes: Sequence[LoadBalancerNode], *, cluster: str
) -> str:
    """Create or replace the ConfigMap ``name`` with ``nodes``; their digest."""
    node_digest = digest(nodes)
    body = {
        "metadata": {
            "name": name,
            "labels": MANAGED_BY,
            "annotations": {
                DIGEST_ANNOTATION: node_digest,
                COUNT_ANNOTATION: str(len(nodes)),
                CLUSTER_ANNOTATION: cluster,
            },
        },
        "binaryData": {DATA_KEY: encode(nodes)},
    }
    if kube.get(CONFIG_MAPS, name, namespace) is None:
        kube.create(CONFIG_MAPS, body, namespace)
    else:
        kube.patch(CONFIG_MAPS, name, body, namespace)
    return node_digest


class NodeSetReader:
    """Reads node-set ConfigMaps, decoding each version once (a worker runs many activities on
    one set: at 5,000 nodes a decode is tens of milliseconds, a GET a fraction of that)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._lock = threading.Lock()
        self._decoded: dict[tuple[str, str], tuple[str, list[LoadBalancerNode]]] = {}

    def read(self, ref: NodeSetRef) -> list[LoadBalancerNode] | None:
        """The nodes the ConfigMap holds now; ``None`` when it does not exist."""
        found = self.kube.get(CONFIG_MAPS, ref.name, ref.namespace)
        if found is None:
            return None
        key = (ref.namespace, ref.name)
        version = str((found.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            cached = self._decoded.get(key)
        if cached is not None and version and cached[0] == version:
            return cached[1]
        nodes = decode((found.get("binaryData") or {}).get(DATA_KEY, ""))
        with self._lock:
            self._decoded[key] = (version, nodes)
        return nodes
