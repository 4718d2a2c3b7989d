"""The listeners a Service asks for, on a Classic ELB and on an NLB, and how they differ from
what the cloud has: pure functions, shared by the ensure and by the drift check.

Classic (upstream ``buildListener``): a port that ``ssl-ports`` selects (all of them when unset
or ``*``) gets the ``ssl-cert`` and a secure front end: ``backend-protocol`` ``http``/``https``
→ HTTPS (the ELB adds ``X-Forwarded-For/-Proto/-Port``), ``ssl``/``tcp`` or none → SSL; without
a certificate ``backend-protocol: http`` gives an HTTP listener, anything else TCP. NLB (upstream
``nlbPortMapping``): a selected TCP port becomes a TLS listener with the certificate and
``ssl-negotiation-policy`` as its SSL policy, and ``backend-protocol: ssl`` makes its target
group TLS too; UDP ports never carry TLS. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloudloop.cloud import models
from cloudloop.cloud.aws.loadbalancers.service_annotations import SECURE_FRONTEND, TlsOptions

PROXY_PROTOCOL_POLICY = "k8s-proxyprotocol-enabled"
SECURE_PROTOCOLS = ("HTTPS", "SSL")


def ssl_negotiation_policy_name(policy: str) -> str:
    """The ELB policy upstream creates for ``ssl-negotiation-policy``."""
    return f"k8s-SSLNegotiationPolicy-{policy}"


def classic_listeners(spec: models.LoadBalancerSpec, tls: TlsOptions) -> list[dict[str, Any]]:
    listeners: list[dict[str, Any]] = []
    for port in spec.ports:
        listener: dict[str, Any] = {"LoadBalancerPort": port.port, "InstancePort": port.node_port}
        if tls.secures(port.name, port.port):
            backend = tls.backend_protocol
            front = SECURE_FRONTEND[backend] if backend else "SSL"
            listener.update(
                Protocol=front,
                InstanceProtocol=(backend or "tcp").upper(),
                SSLCertificateId=tls.certificate,
            )
        elif tls.backend_protocol == "http":
            listener.update(Protocol="HTTP", InstanceProtocol="HTTP")
        else:
            listener.update(Protocol="TCP", InstanceProtocol="TCP")
        listeners.append(listener)
    return listeners


@dataclass(frozen=True)
class ClassicListenerPlan:
    """What turns the current listeners into the wanted ones: ports to delete, listeners to
    create (changed protocol or port: AWS cannot modify them), certificates to swap in place."""

    delete: list[int]
    create: list[dict[str, Any]]
    certificates: dict[int, str]

    @property
    def empty(self) -> bool:
        return not (self.delete or self.create or self.certificates)

    def describe(self) -> list[str]:
        found = [f"listener {p} differs or is extra" for p in self.delete]
        found += [
            f"listener {lst['LoadBalancerPort']} missing"
            for lst in self.create
            if lst["LoadBalancerPort"] not in self.delete
        ]
        found += [f"listener {p} has another certificate" for p in sorted(self.certificates)]
        return found


def _upper(value: Any) -> str:
    return str(value or "").upper()


def plan_classic_listeners(
    descriptions: list[dict[str, Any]], wanted: list[dict[str, Any]]
) -> ClassicListenerPlan:
    current = {int(d["Listener"]["LoadBalancerPort"]): d["Listener"] for d in descriptions}
    by_port = {int(lst["LoadBalancerPort"]): lst for lst in wanted}
    delete: list[int] = []
    certificates: dict[int, str] = {}
    for port, listener in sorted(current.items()):
        want = by_port.get(port)
        if want is None:
            delete.append(port)
            continue
        same_shape = (
            _upper(listener.get("Protocol")) == _upper(want["Protocol"])
            and _upper(listener.get("InstanceProtocol")) == _upper(want["InstanceProtocol"])
            and int(listener.get("InstancePort", 0)) == int(want["InstancePort"])
        )
        if not same_shape:
            delete.append(port)
        elif str(listener.get("SSLCertificateId") or "") != str(want.get("SSLCertificateId") or ""):
            certificates[port] = str(want["SSLCertificateId"])
    create = [lst for port, lst in sorted(by_port.items()) if port not in current or port in delete]
    return ClassicListenerPlan(delete=delete, create=create, certificates=certificates)


def secure_ports(listeners: list[dict[str, Any]]) -> list[int]:
    return sorted(
        int(lst["LoadBalancerPort"])
        for lst in listeners
        if _upper(lst["Protocol"]) in SECURE_PROTOCOLS
    )


@dataclass(frozen=True)
class NlbPortMapping:
    """One NLB port: its listener and its target group's protocol."""

    port: models.LoadBalancerPort
    frontend_protocol: str  # TCP | UDP | TLS
    traffic_protocol: str  # TCP | UDP | TLS
    certificate: str | None = None
    ssl_policy: str | None = None


def nlb_port_mappings(spec: models.LoadBalancerSpec, tls: TlsOptions) -> list[NlbPortMapping]:
    mappings: list[NlbPortMapping] = []
    for port in spec.ports:
        protocol = port.protocol.upper()
        if protocol != "UDP" and tls.secures(port.name, port.port):
            mappings.append(
                NlbPortMapping(
                    port=port,
                    frontend_protocol="TLS",
                    traffic_protocol="TLS" if tls.backend_protocol == "ssl" else protocol,
                    certificate=tls.certificate,
                    ssl_policy=tls.negotiation_policy,
                )
            )
        else:
            mappings.append(NlbPortMapping(port, protocol, protocol))
    return mappings


def nlb_listener_differs(listener: dict[str, Any], mapping: NlbPortMapping, group_arn: str) -> bool:
    """Whether the NLB listener must be modified (protocol, target group, TLS settings); the SSL
    policy counts only when the annotation names one (AWS picks a default otherwise)."""
    targets = [a.get("TargetGroupArn") for a in listener.get("DefaultActions", [])]
    if targets != [group_arn] or _upper(listener.get("Protocol")) != mapping.frontend_protocol:
        return True
    if mapping.frontend_protocol != "TLS":
        return False
    certificates = [c.get("CertificateArn") for c in listener.get("Certificates") or []]
    if certificates[:1] != [mapping.certificate]:
        return True
    return mapping.ssl_policy is not None and listener.get("SslPolicy") != mapping.ssl_policy


def nlb_listener_arguments(mapping: NlbPortMapping, group_arn: str) -> dict[str, Any]:
    """CreateListener/ModifyListener arguments for ``mapping`` (without the LB or listener)."""
    arguments: dict[str, Any] = {
        "Protocol": mapping.frontend_protocol,
        "Port": mapping.port.port,
        "DefaultActions": [{"Type": "forward", "TargetGroupArn": group_arn}],
    }
    if mapping.frontend_protocol == "TLS":
        arguments["Certificates"] = [{"CertificateArn": mapping.certificate}]
        if mapping.ssl_policy:
            arguments["SslPolicy"] = mapping.ssl_policy
    return arguments
