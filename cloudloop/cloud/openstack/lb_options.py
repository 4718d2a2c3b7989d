"""The ``loadbalancer.openstack.org/*`` annotations over ``[LoadBalancer]``, as one options value.

Pure: :func:`parse_options` reads a Service's annotations the way cloud-provider-openstack's
``loadbalancer.go`` does (annotation → ``[LoadBalancerClass]`` → ``[LoadBalancer]``), and
:func:`listener_protocol`, :func:`pool_protocol` and :func:`monitor_spec` derive what Octavia
gets. Booleans are only ``true``/``false``, numbers must parse; anything else is an
:class:`~cloudloop.cloud.errors.InvalidRequest` naming the annotation, raised before any cloud
write. Sharing one Octavia LB between Services (``load-balancer-id`` naming another Service's
LB) is not supported and is refused the same way (by the driver, which reads the LB first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.settings import LoadBalancerClassSettings, LoadBalancerSettings

NAME = "openstack"
PREFIX = "loadbalancer.openstack.org/"
INTERNAL_ANNOTATION = "service.beta.kubernetes.io/openstack-internal-load-balancer"
LB_METHODS = ("ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT")


def invalid(message: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(NAME, "EnsureLoadBalancer", message)


@dataclass(frozen=True)
class MonitorOptions:
    enabled: bool
    delay_s: int
    timeout_s: int
    max_retries: int
    max_retries_down: int


@dataclass(frozen=True)
class LoadBalancerOptions:
    internal: bool = False
    subnet_id: str = ""
    network_id: str = ""
    member_subnet_id: str = ""
    port_id: str = ""
    flavor_id: str = ""
    availability_zone: str = ""
    provider: str = "amphora"
    floating_network_id: str = ""
    floating_subnet_id: str = ""
    floating_subnet: str = ""
    floating_subnet_tags: str = ""
    keep_floating_ip: bool = False
    connection_limit: int = -1
    lb_method: str = "ROUND_ROBIN"
    #: "" (none), ``PROXY`` or ``PROXYV2`` (the pool protocol).
    proxy_protocol: str = ""
    x_forwarded_for: bool = False
    default_tls_container_ref: str = ""
    timeouts: dict[str, int] = field(default_factory=dict)
    monitor: MonitorOptions = MonitorOptions(False, 5, 3, 1, 3)
    node_selector: dict[str, str] = field(default_factory=dict)
    hostname: str = ""
    enable_ingress_hostname: bool = False
    ingress_hostname_suffix: str = "nip.io"
    load_balancer_id: str = ""
    cascade_delete: bool = True
    serial: bool = False


def _bool(annotations: dict[str, str], key: str, default: bool) -> bool:
    value = annotations.get(key)
    if value is None:
        return default
    if value not in ("true", "false"):
        raise invalid(f"annotation {key}: {value!r} is not true or false")
    return value == "true"


def _int(annotations: dict[str, str], key: str, default: int, *, low: int, high: int) -> int:
    value = annotations.get(key)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise invalid(f"annotation {key}: {value!r} is not an integer") from None
    if not low <= number <= high:
        raise invalid(f"annotation {key}: {number} is outside {low}..{high}")
    return number


def _selector(text: str, key: str) -> dict[str, str]:
    """``k1=v1,k2`` (a key alone matches any value, stored as ``""``)."""
    selector: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, value = part.partition("=")
        if not name.strip():
            raise invalid(f"annotation {key}: {part!r} has no label key")
        selector[name.strip()] = value.strip()
    return selector


def parse_options(
    spec: models.LoadBalancerSpec, config: LoadBalancerSettings
) -> LoadBalancerOptions:
    """The options of ``spec`` (annotations over the class, over ``[LoadBalancer]``)."""
    a = spec.annotations

    def text(key: str) -> str:
        return a.get(PREFIX + key, "").strip()

    class_name = text("class")
    lb_class = LoadBalancerClassSettings()
    if class_name:
        if class_name not in config.classes:
            raise invalid(f"annotation {PREFIX}class: no [LoadBalancerClass {class_name!r}]")
        lb_class = config.classes[class_name]

    def placed(key: str, class_value: str, config_value: str) -> str:
        return text(key) or class_value or config_value

    internal = config.internal_lb or _bool(a, INTERNAL_ANNOTATION, False)
    proxy = text("proxy-protocol")
    proxy_protocol = {"": "", "false": "", "true": "PROXY", "v1": "PROXY", "v2": "PROXYV2"}.get(
        proxy
    )
    if proxy_protocol is None:
        raise invalid(f"annotation {PREFIX}proxy-protocol: {proxy!r} is not true, v1 or v2")
    x_forwarded_for = _bool(a, PREFIX + "x-forwarded-for", False)
    if proxy_protocol and x_forwarded_for:
        raise invalid("proxy-protocol and x-forwarded-for cannot be used together")
    lb_method = text("lb-method") or config.lb_method
    if lb_method not in LB_METHODS:
        raise invalid(f"annotation {PREFIX}lb-method: {lb_method!r} is not one of {LB_METHODS}")
    timeouts: dict[str, int] = {}
    for key in ("client-data", "member-connect", "member-data", "tcp-inspect"):
        full = f"{PREFIX}timeout-{key}"
        if full in a:
            timeouts[f"timeout_{key.replace('-', '_')}"] = _int(a, full, 0, low=0, high=31536000)
    monitor_default = config.create_monitor
    monitor = MonitorOptions(
        enabled=_bool(a, PREFIX + "enable-health-monitor", monitor_default),
        delay_s=_int(a, PREFIX + "health-monitor-delay", config.monitor_delay_s, low=1, high=86400),
        timeout_s=_int(
            a, PREFIX + "health-monitor-timeout", config.monitor_timeout_s, low=1, high=86400
        ),
        max_retries=_int(
            a, PREFIX + "health-monitor-max-retries", config.monitor_max_retries, low=1, high=10
        ),
        max_retries_down=_int(
            a,
            PREFIX + "health-monitor-max-retries-down",
            config.monitor_max_retries_down,
            low=1,
            high=10,
        ),
    )
    if monitor.enabled and monitor.timeout_s > monitor.delay_s:
        raise invalid("health-monitor-timeout must not be longer than health-monitor-delay")
    return LoadBalancerOptions(
        internal=internal,
        subnet_id=placed("subnet-id", lb_class.subnet_id, config.subnet_id),
        network_id=placed("network-id", lb_class.network_id, config.network_id),
        member_subnet_id=placed(
            "member-subnet-id", lb_class.member_subnet_id, config.member_subnet_id
        ),
        port_id=text("port-id"),
        flavor_id=text("flavor-id") or config.flavor_id,
        availability_zone=text("availability-zone") or config.availability_zone,
        provider=config.lb_provider or "amphora",
        floating_network_id=placed(
            "floating-network-id", lb_class.floating_network_id, config.floating_network_id
        ),
        floating_subnet_id=placed(
            "floating-subnet-id", lb_class.floating_subnet_id, config.floating_subnet_id
        ),
        floating_subnet=placed("floating-subnet", lb_class.floating_subnet, config.floating_subnet),
        floating_subnet_tags=placed(
            "floating-subnet-tags", lb_class.floating_subnet_tags, config.floating_subnet_tags
        ),
        keep_floating_ip=_bool(a, PREFIX + "keep-floatingip", False),
        connection_limit=_int(a, PREFIX + "connection-limit", -1, low=-1, high=2**31 - 1),
        lb_method=lb_method,
        proxy_protocol=proxy_protocol,
        x_forwarded_for=x_forwarded_for,
        default_tls_container_ref=text("default-tls-container-ref"),
        timeouts=timeouts,
        monitor=monitor,
        node_selector=_selector(
            text("node-selector") or config.node_selector, PREFIX + "node-selector"
        ),
        hostname=text("hostname"),
        enable_ingress_hostname=config.enable_ingress_hostname,
        ingress_hostname_suffix=config.ingress_hostname_suffix,
        load_balancer_id=text("load-balancer-id"),
        cascade_delete=config.cascade_delete,
        serial=config.provider_requires_serial_api_calls,
    )


def listener_protocol(port: models.LoadBalancerPort, options: LoadBalancerOptions) -> str:
    protocol = port.protocol.upper()
    if protocol not in ("TCP", "UDP", "SCTP"):
        raise invalid(f"port {port.port}: protocol {port.protocol} is not supported")
    if options.default_tls_container_ref and protocol == "TCP":
        return "TERMINATED_HTTPS"
    if options.x_forwarded_for and protocol == "TCP":
        return "HTTP"
    return protocol


def pool_protocol(listener: str, options: LoadBalancerOptions) -> str:
    if options.proxy_protocol and listener in ("TCP", "HTTP", "TERMINATED_HTTPS"):
        return options.proxy_protocol
    if listener in ("HTTP", "TERMINATED_HTTPS"):
        return "HTTP"
    return listener


def monitor_spec(
    spec: models.LoadBalancerSpec, pool_proto: str, options: LoadBalancerOptions
) -> dict[str, object] | None:
    """The health monitor a pool gets (``None``: none): TCP / UDP-CONNECT, or HTTP ``/healthz``
    on the health-check node port for ``externalTrafficPolicy: Local``."""
    m = options.monitor
    if not m.enabled:
        return None
    body: dict[str, object] = {
        "delay": m.delay_s,
        "timeout": m.timeout_s,
        "max_retries": m.max_retries,
        "max_retries_down": m.max_retries_down,
    }
    local = spec.external_traffic_policy == "Local" and spec.health_check_node_port > 0
    if local and options.provider != "ovn":
        return {
            **body,
            "type": "HTTP",
            "http_method": "GET",
            "url_path": "/healthz",
            "expected_codes": "200",
        }
    return {
        **body,
        "type": "UDP-CONNECT"
        if pool_proto == "UDP"
        else ("SCTP" if pool_proto == "SCTP" else "TCP"),
    }


def node_matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return all(
        key in labels and (not value or labels[key] == value) for key, value in selector.items()
    )
