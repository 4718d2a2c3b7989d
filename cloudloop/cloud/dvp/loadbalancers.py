"""DVP load balancers: a Service of type LoadBalancer in the parent namespace, fed by an
EndpointSlice of the node VMs' addresses on the Service's node ports (Deckhouse's DVP CCM).

The parent cluster's own load-balancer controller gives the parent Service its address, which
becomes the child Service's ingress; the backends are written as an EndpointSlice, so a node-set
change is one slice update and no VM is relabelled.
Departures from Deckhouse: docs/decisions/0047-one-load-balancer-workflow-per-service.md.

Rules:
- Identity: the parent Service and its slice are named ``a`` + the child's UID without dashes
  (upstream ``DefaultLoadBalancerName``) and carry the cluster's labels, the tenant-service
  labels and ``cloudloop.io/service-uid``; a namesake without our UID label is someone else's
  and is never changed or deleted (``AlreadyExists``).
- The parent Service has no selector: ``port`` maps to the child's ``nodePort``; the slice lists
  each backend VM's IP, ``ready`` = VM Running (VMs without an IP left out). Annotations,
  ``externalTrafficPolicy`` and ``loadBalancerSourceRanges`` are copied.
- Ensure waits (bounded by ``lb_ingress_timeout_s``) for the parent's address; without one it
  raises a retryable error. Delete removes the slice and the Service and is idempotent.
"""

from __future__ import annotations

import time
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import LoadBalancerDefaults
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import NAME, DvpBase

TENANT_SERVICE_NAME_LABEL = "cluster.x-k8s.io/tenant-service-name"
TENANT_SERVICE_NAMESPACE_LABEL = "cluster.x-k8s.io/tenant-service-namespace"
TENANT_CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
SERVICE_UID_LABEL = "cloudloop.io/service-uid"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "cloudloop.io"
#: Child Service annotations that only mean something to the child cluster's tools.
_SKIPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def _parent_ports(spec: models.LoadBalancerSpec) -> list[dict[str, Any]]:
    return [
        {
            **({"name": p.name} if p.name else {}),
            "protocol": p.protocol,
            "port": p.port,
            "targetPort": p.node_port,
        }
        for p in spec.ports
    ]


def _same(current: dict[str, Any], key: str, value: Any) -> bool:
    """The parent's field already has the wanted value (absent, null and empty are the same;
    the server adds ``nodePort`` to ports, which is not compared)."""
    have = current.get(key)
    if key == "ports":
        have = [{k: v for k, v in p.items() if k != "nodePort"} for p in have or []]
    return (have or None) == (value or None)


def ingress_of(service: dict[str, Any]) -> models.LoadBalancerStatus | None:
    """The parent Service's first ingress (IP or hostname), if it has one yet."""
    name = service["metadata"]["name"]
    for entry in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
        if entry.get("ip") or entry.get("hostname"):
            return models.LoadBalancerStatus(
                name=name, ip=str(entry.get("ip") or ""), hostname=str(entry.get("hostname") or "")
            )
    return None


class DvpLoadBalancers(LoadBalancerDefaults):
    provider = NAME

    def __init__(self, session: DvpBase) -> None:
        self.session = session

    # -- bodies ----------------------------------------------------------------------------
    def _lb_labels(self, spec: models.LoadBalancerSpec) -> dict[str, str]:
        namespace, _, name = spec.service.partition("/")
        return {
            **self.session.cluster_labels(),
            TENANT_SERVICE_NAME_LABEL: name[:63],
            TENANT_SERVICE_NAMESPACE_LABEL: namespace[:63],
            TENANT_CLUSTER_LABEL: spec.cluster[:63],
            SERVICE_UID_LABEL: spec.service_uid,
        }

    def _service_spec(self, spec: models.LoadBalancerSpec) -> dict[str, Any]:
        return {
            "type": "LoadBalancer",
            "ports": _parent_ports(spec),
            "externalTrafficPolicy": spec.external_traffic_policy or "Cluster",
            "loadBalancerSourceRanges": list(spec.source_ranges) or None,
        }

    def _slice_body(
        self, spec: models.LoadBalancerSpec, vms: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        endpoints: list[dict[str, Any]] = []
        for instance_id in sorted(set(spec.backend_instance_ids)):
            vm = vms.get(instance_id)
            ip = str(((vm or {}).get("status") or {}).get("ipAddress") or "")
            if vm is None or not ip:
                continue
            running = (vm.get("status") or {}).get("phase") == "Running"
            endpoint: dict[str, Any] = {
                "addresses": [ip],
                "conditions": {"ready": running, "serving": running, "terminating": False},
                "targetRef": {
                    "apiVersion": r.API_VERSION,
                    "kind": "VirtualMachine",
                    "name": instance_id,
                    "namespace": self.session.namespace,
                },
            }
            node = (vm.get("status") or {}).get("nodeName")
            if node:
                endpoint["nodeName"] = str(node)
            endpoints.append(endpoint)
        return {
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [
                {
                    **({"name": p.name} if p.name else {"name": ""}),
                    "protocol": p.protocol,
                    "port": p.node_port,
                }
                for p in spec.ports
            ],
        }

    # -- helpers ---------------------------------------------------------------------------
    def _ours(self, obj: dict[str, Any], uid: str | None = None) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if not all(labels.get(k) == v for k, v in self.session.cluster_labels().items()):
            return False
        return uid is None or labels.get(SERVICE_UID_LABEL) == uid

    def _backend_vms(self) -> dict[str, dict[str, Any]]:
        vms = self.session.list_objects(
            r.VIRTUAL_MACHINES, label_selector=self.session.cluster_selector()
        )
        return {str(vm["metadata"]["name"]): vm for vm in vms}

    def _write_slice(
        self,
        spec: models.LoadBalancerSpec,
        service: dict[str, Any],
        vms: dict[str, dict[str, Any]],
    ) -> None:
        body = self._slice_body(spec, vms)
        labels = {
            **self._lb_labels(spec),
            SERVICE_NAME_LABEL: spec.name,
            MANAGED_BY_LABEL: MANAGED_BY,
        }
        existing = self.session.get(r.ENDPOINT_SLICES, spec.name)
        if existing is None:
            owner = {
                "apiVersion": "v1",
                "kind": "Service",
                "name": spec.name,
                "uid": service["metadata"]["uid"],
            }
            created = self.session.create(
                r.ENDPOINT_SLICES,
                {
                    "metadata": {
                        "name": spec.name,
                        "namespace": self.session.namespace,
                        "labels": labels,
                        "ownerReferences": [owner],
                    },
                    **body,
                },
            )
            if created is not None:
                return
            existing = self.session.get(r.ENDPOINT_SLICES, spec.name)
            if existing is None:
                raise errors.CloudError(NAME, "CreateEndpointSlice", "slice vanished; retry")
        if not self._ours(existing, spec.service_uid):
            raise errors.AlreadyExists(
                NAME, "UpdateEndpointSlice", f"EndpointSlice {spec.name!r} belongs to another"
            )
        if all(existing.get(k) == v for k, v in body.items()):
            return
        self.session.patch(r.ENDPOINT_SLICES, spec.name, {"metadata": {"labels": labels}, **body})

    def _service(self, spec: models.LoadBalancerSpec) -> dict[str, Any] | None:
        service = self.session.get(r.SERVICES, spec.name)
        if service is not None and not self._ours(service, spec.service_uid):
            raise errors.AlreadyExists(
                NAME, "GetService", f"Service {spec.name!r} in the parent belongs to another"
            )
        return service

    # -- the contract ----------------------------------------------------------------------
    def ensure_load_balancer(self, spec: models.LoadBalancerSpec) -> models.LoadBalancerStatus:
        if not spec.ports:
            raise errors.InvalidRequest(NAME, "EnsureLoadBalancer", "the Service has no ports")
        missing = [p.port for p in spec.ports if not p.node_port]
        if missing:
            raise errors.InvalidRequest(
                NAME, "EnsureLoadBalancer", f"ports {missing} have no nodePort"
            )
        annotations = {k: v for k, v in spec.annotations.items() if k not in _SKIPPED_ANNOTATIONS}
        wanted = self._service_spec(spec)
        service = self._service(spec)
        if service is None:
            wanted = {k: v for k, v in wanted.items() if v is not None}
            created = self.session.create(
                r.SERVICES,
                {
                    "metadata": {
                        "name": spec.name,
                        "namespace": self.session.namespace,
                        "labels": self._lb_labels(spec),
                        "annotations": annotations,
                    },
                    "spec": wanted,
                },
            )
            service = created if created is not None else self._service(spec)
            if service is None:
                raise errors.CloudError(NAME, "CreateService", "Service vanished; retry")
        elif any(not _same(service.get("spec") or {}, k, v) for k, v in wanted.items()) or (
            (service["metadata"].get("annotations") or {}) != annotations
        ):
            current = service["metadata"].get("annotations") or {}
            patch_annotations: dict[str, Any] = {k: None for k in current if k not in annotations}
            patch_annotations.update(annotations)
            service = self.session.patch(
                r.SERVICES,
                spec.name,
                {
                    "metadata": {"labels": self._lb_labels(spec), "annotations": patch_annotations},
                    "spec": wanted,
                },
            )
        self._write_slice(spec, service, self._backend_vms())
        return self._wait_for_ingress(service)

    def _wait_for_ingress(self, service: dict[str, Any]) -> models.LoadBalancerStatus:
        name = service["metadata"]["name"]
        deadline = time.monotonic() + self.session.settings.lb_ingress_timeout_s
        delay = 0.05
        while True:
            status = ingress_of(service)
            if status is not None:
                return status
            if time.monotonic() >= deadline:
                raise errors.CloudError(
                    NAME,
                    "EnsureLoadBalancer",
                    f"the parent cluster gave Service {name!r} no address yet",
                )
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
            found = self.session.get(r.SERVICES, name)
            if found is None:
                raise errors.CloudError(NAME, "EnsureLoadBalancer", f"Service {name!r} vanished")
            service = found

    def update_load_balancer_backends(self, spec: models.LoadBalancerSpec) -> None:
        service = self._service(spec)
        if service is None:
            raise errors.NotFound(NAME, "UpdateLoadBalancer", f"no Service {spec.name!r}")
        self._write_slice(spec, service, self._backend_vms())

    def get_load_balancer(self, name: str) -> models.LoadBalancerStatus | None:
        service = self.session.get(r.SERVICES, name)
        if service is None or not self._ours(service):
            return None
        return ingress_of(service) or models.LoadBalancerStatus(name=name)

    def delete_load_balancer(self, name: str) -> None:
        for piece in (r.ENDPOINT_SLICES, r.SERVICES):
            found = self.session.get(piece, name)
            if found is not None and self._ours(found):
                self.session.delete(piece, name)
