"""Upstream's configuration files as settings: ``cloud.conf`` (gcfg INI) and Deckhouse's YAML.

:func:`parse_cloud_conf` reads cloud-provider-openstack's ``cloud.conf`` the way gcfg does
(case-insensitive sections and keys, ``[LoadBalancerClass "name"]`` subsections, quoted values
with escapes, ``;``/``#`` comments, repeated keys for lists, durations such as ``5s``);
:func:`parse_cluster_configuration` reads the ``provider`` block (and network names, zones,
tags, SSH key) of an ``OpenStackClusterConfiguration``. :func:`resolve` lays both over the
settings.

Rules: unknown keys are ignored (gcfg's non-fatal errors, as CPO reads with ``FatalOnly``), a
malformed line or value is a :class:`ConfigError` naming the line; nothing here logs a value.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr

from cloudloop.cloud.openstack.settings import (
    LoadBalancerClassSettings,
    OpenStackSettings,
)
from cloudloop.errortext import yaml_problem
from cloudloop.tls import ca_file


class ConfigError(ValueError):
    """A ``cloud.conf`` or cluster configuration that cannot be read."""


_SECTION = re.compile(r'^\[\s*([A-Za-z0-9_.-]+)\s*(?:"((?:[^"\\]|\\.)*)")?\s*\]$')
_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)\s*(?:=\s*(.*))?$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_TRUE = {"true", "yes", "on", "1", ""}
_FALSE = {"false", "no", "off", "0"}

#: cloud.conf key → (settings path, kind). Kinds: str, bool, int, duration, list, csv, secret.
_GLOBAL = {
    "auth-url": ("connection.auth_url", "str"),
    "username": ("connection.username", "str"),
    "user-id": ("connection.user_id", "str"),
    "password": ("connection.password", "secret"),
    "tenant-id": ("connection.tenant_id", "str"),
    "project-id": ("connection.tenant_id", "str"),
    "tenant-name": ("connection.tenant_name", "str"),
    "project-name": ("connection.tenant_name", "str"),
    "tenant-domain-id": ("connection.tenant_domain_id", "str"),
    "tenant-domain-name": ("connection.tenant_domain_name", "str"),
    "domain-id": ("connection.domain_id", "str"),
    "domain-name": ("connection.domain_name", "str"),
    "user-domain-id": ("connection.user_domain_id", "str"),
    "user-domain-name": ("connection.user_domain_name", "str"),
    "region": ("connection.region", "str"),
    "os-endpoint-type": ("connection.os_endpoint_type", "str"),
    "ca-file": ("connection.ca_file", "str"),
    "tls-insecure": ("connection.tls_insecure", "bool"),
    "application-credential-id": ("connection.application_credential_id", "str"),
    "application-credential-name": ("connection.application_credential_name", "str"),
    "application-credential-secret": ("connection.application_credential_secret", "secret"),
}
_NETWORKING = {
    "public-network-name": ("networking.public_network_names", "list"),
    "internal-network-name": ("networking.internal_network_names", "list"),
    "ipv6-support-disabled": ("networking.ipv6_support_disabled", "bool"),
    "address-sort-order": ("networking.address_sort_order", "csv"),
}
_LOAD_BALANCER = {
    "enabled": ("load_balancer.enabled", "bool"),
    "lb-provider": ("load_balancer.lb_provider", "str"),
    "lb-method": ("load_balancer.lb_method", "str"),
    "subnet-id": ("load_balancer.subnet_id", "str"),
    "member-subnet-id": ("load_balancer.member_subnet_id", "str"),
    "network-id": ("load_balancer.network_id", "str"),
    "floating-network-id": ("load_balancer.floating_network_id", "str"),
    "floating-subnet-id": ("load_balancer.floating_subnet_id", "str"),
    "floating-subnet": ("load_balancer.floating_subnet", "str"),
    "floating-subnet-tags": ("load_balancer.floating_subnet_tags", "str"),
    "internal-lb": ("load_balancer.internal_lb", "bool"),
    "node-selector": ("load_balancer.node_selector", "str"),
    "create-monitor": ("load_balancer.create_monitor", "bool"),
    "monitor-delay": ("load_balancer.monitor_delay_s", "duration"),
    "monitor-timeout": ("load_balancer.monitor_timeout_s", "duration"),
    "monitor-max-retries": ("load_balancer.monitor_max_retries", "int"),
    "monitor-max-retries-down": ("load_balancer.monitor_max_retries_down", "int"),
    "cascade-delete": ("load_balancer.cascade_delete", "bool"),
    "flavor-id": ("load_balancer.flavor_id", "str"),
    "availability-zone": ("load_balancer.availability_zone", "str"),
    "enable-ingress-hostname": ("load_balancer.enable_ingress_hostname", "bool"),
    "ingress-hostname-suffix": ("load_balancer.ingress_hostname_suffix", "str"),
    "max-shared-lb": ("load_balancer.max_shared_lb", "int"),
    "provider-requires-serial-api-calls": (
        "load_balancer.provider_requires_serial_api_calls",
        "bool",
    ),
}
_CLASS_KEYS = {
    "floating-network-id",
    "floating-subnet-id",
    "floating-subnet",
    "floating-subnet-tags",
    "network-id",
    "subnet-id",
    "member-subnet-id",
}
_SECTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "global": _GLOBAL,
    "networking": _NETWORKING,
    "loadbalancer": _LOAD_BALANCER,
    "route": {"router-id": ("route.router_id", "str")},
    "blockstorage": {
        "node-volume-attach-limit": ("block_storage.node_volume_attach_limit", "int"),
        "rescan-on-resize": ("block_storage.rescan_on_resize", "bool"),
        "ignore-volume-az": ("block_storage.ignore_volume_az", "bool"),
        "ignore-volume-microversion": ("block_storage.ignore_volume_microversion", "bool"),
    },
    "metadata": {"request-timeout": ("request_timeout_s", "duration")},
}


def _unquote(raw: str, line_no: int) -> str:
    """A gcfg value: quoted parts with escapes, unquoted parts trimmed, comments dropped."""
    out: list[str] = []
    quoted = False
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(nxt, nxt))
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in ";#":
            break
        else:
            out.append(ch)
        i += 1
    if quoted:
        raise ConfigError(f"line {line_no}: unterminated quote")
    return "".join(out).strip()


def _convert(value: str, kind: str, key: str, line_no: int) -> Any:
    if kind in ("str", "list"):
        return value
    if kind == "secret":
        return SecretStr(value)
    if kind == "csv":
        return [part.strip() for part in value.split(",") if part.strip()]
    if kind == "bool":
        lowered = value.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"line {line_no}: {key} must be true or false")
    if kind == "int":
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"line {line_no}: {key} must be an integer") from None
    if kind == "duration":
        found = _DURATION.match(value.strip())
        if found is None:
            raise ConfigError(f"line {line_no}: {key} must be a duration such as 5s")
        number = float(found.group(1))
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[found.group(2)]
        seconds = number * scale
        return int(seconds) if seconds == int(seconds) else seconds
    raise AssertionError(kind)


def parse_cloud_conf(text: str) -> dict[str, Any]:
    """``cloud.conf`` → nested settings values (only the keys present)."""
    values: dict[str, Any] = {}
    section: str | None = None
    subsection: str | None = None
    for line_no, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line[0] in ";#":
            continue
        header = _SECTION.match(line)
        if header is not None:
            section = header.group(1).lower()
            subsection = header.group(2)
            continue
        found = _KEY.match(line)
        if found is None or section is None:
            raise ConfigError(f"line {line_no}: cannot parse (key = value in a [section] expected)")
        key = found.group(1).lower()
        value = _unquote(found.group(2) or "", line_no)
        if section == "loadbalancerclass":
            if subsection is None:
                raise ConfigError(f"line {line_no}: [LoadBalancerClass] needs a name")
            if key in _CLASS_KEYS:
                classes = values.setdefault("load_balancer", {}).setdefault("classes", {})
                classes.setdefault(subsection, {})[key.replace("-", "_")] = value
            continue
        known = _SECTIONS.get(section, {}).get(key)
        if known is None:
            continue  # unknown section or key: ignored, as gcfg's non-fatal errors
        path, kind = known
        converted = _convert(value, kind, key, line_no)
        target = values
        *parents, leaf = path.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        if kind == "list":
            target.setdefault(leaf, []).append(converted)
        else:
            target[leaf] = converted
    return values


def parse_cluster_configuration(text: str) -> dict[str, Any]:
    """Deckhouse ``OpenStackClusterConfiguration`` → nested settings values."""
    try:
        document = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_problem(exc)) from None
    if not isinstance(document, dict) or document.get("kind") != "OpenStackClusterConfiguration":
        raise ConfigError("not an OpenStackClusterConfiguration")
    provider = document.get("provider") or {}
    connection: dict[str, Any] = {}
    for source, target in (
        ("authURL", "auth_url"),
        ("domainName", "domain_name"),
        ("tenantName", "tenant_name"),
        ("tenantID", "tenant_id"),
        ("username", "username"),
        ("region", "region"),
    ):
        if provider.get(source):
            connection[target] = str(provider[source])
    if provider.get("password"):
        connection["password"] = SecretStr(str(provider["password"]))
    if provider.get("caCert"):
        connection["ca_file"] = Path(ca_file(str(provider["caCert"])))
    values: dict[str, Any] = {"connection": connection}
    layout = str(document.get("layout") or "")
    layout_key = layout[:1].lower() + layout[1:]
    section = document.get(layout_key) or {}
    if isinstance(section, dict) and section.get("externalNetworkName"):
        values["networking"] = {"public_network_names": [str(section["externalNetworkName"])]}
    if document.get("zones"):
        values["zones"] = [str(z) for z in document["zones"]]
    if document.get("sshPublicKey"):
        values["ssh_public_key"] = str(document["sshPublicKey"])
    if isinstance(document.get("tags"), dict):
        values["tags"] = {str(k): str(v) for k, v in document["tags"].items()}
    if isinstance(section, dict) and section.get("podNetworkMode"):
        values["pod_network_mode"] = str(section["podNetworkMode"])
    return values


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def resolve(settings: OpenStackSettings) -> OpenStackSettings:
    """The settings with the cluster configuration and then ``cloud.conf`` laid over them."""
    values = settings.model_dump()
    # model_dump turns SecretStr into SecretStr (kept) and nested models into dicts.
    layers: list[dict[str, Any]] = []
    if settings.cluster_configuration_file is not None:
        layers.append(parse_cluster_configuration(settings.cluster_configuration_file.read_text()))
    if settings.cloud_config_file is not None:
        layers.append(parse_cloud_conf(settings.cloud_config_file.read_text()))
    for layer in layers:
        values = _merge(values, layer)
    classes = values.get("load_balancer", {}).get("classes", {})
    values["load_balancer"]["classes"] = {
        name: LoadBalancerClassSettings.model_validate(body) for name, body in classes.items()
    }
    return OpenStackSettings.model_validate(values)
