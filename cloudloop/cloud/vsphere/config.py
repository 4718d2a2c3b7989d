"""The vSphere CPI's ``vsphere.conf`` (YAML, else INI) and its credentials Secret, parsed.

:func:`parse_cloud_config` reads upstream's two formats into one :class:`CloudConfig`;
:func:`read_credentials` reads the ``<server>.username``/``<server>.password`` keys of the
credentials Secret mounted as files; :func:`apply_env` applies upstream's ``VSPHERE_*`` overrides.

Rules (as cloud-provider-vsphere ``pkg/common/config``):
- YAML is tried first; a document that is not a YAML mapping with known keys is read as INI
  (``[Global]``, ``[VirtualCenter "<host>"]``, ``[Labels]``, ``[Nodes]``, kebab-case keys).
- Every connection key of ``global`` is inherited by each vCenter entry that does not set it;
  a global ``server`` makes an implicit vCenter entry. In YAML the ``vcenter`` map key is only a
  label (``server`` names the host); in INI the section name is the host.
- ``user``/``password`` are required unless a Secret (``secretName``) or ``secretsDirectory`` is
  given, and a Secret and ``secretsDirectory`` exclude each other.
- Secrets come from files only: the Secret must be mounted (``secretsDirectory``); a bare
  ``secretName`` is refused with a message saying so (upstream would read it from the API).
- Errors are :class:`ConfigError` with the offending key; passwords never appear in them.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PORT = 443
DEFAULT_ROUNDTRIPS = 3


class ConfigError(ValueError):
    """The vSphere configuration is invalid (the message names the key)."""


@dataclass(frozen=True)
class VcenterConfig:
    """One ``vcenter`` entry after inheriting from ``global``."""

    server: str
    port: int = DEFAULT_PORT
    user: str = ""
    password: str = field(default="", repr=False)
    insecure: bool = False
    datacenters: tuple[str, ...] = ()
    ca_file: str = ""
    thumbprint: str = ""
    secret_name: str = ""
    secret_namespace: str = ""
    soap_roundtrip_count: int = DEFAULT_ROUNDTRIPS
    ip_family: tuple[str, ...] = ("ipv4",)

    @property
    def address(self) -> str:
        host = f"[{self.server}]" if ":" in self.server else self.server
        return host if self.port == DEFAULT_PORT else f"{host}:{self.port}"


@dataclass(frozen=True)
class NodesConfig:
    """``nodes``: how node addresses are chosen among the VM's guest IPs."""

    internal_subnets: tuple[str, ...] = ()
    external_subnets: tuple[str, ...] = ()
    exclude_internal_subnets: tuple[str, ...] = ()
    exclude_external_subnets: tuple[str, ...] = ()
    internal_network_names: tuple[str, ...] = ()
    external_network_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class CloudConfig:
    vcenters: tuple[VcenterConfig, ...] = ()
    region_category: str = ""
    zone_category: str = ""
    nodes: NodesConfig = NodesConfig()
    secrets_directory: str = ""


# -- key tables: (YAML name, INI name) → field ----------------------------------------------------
_CONNECTION_KEYS = {
    "server": ("server", "server"),
    "port": ("port", "port"),
    "user": ("user", "user"),
    "password": ("password", "password"),
    "insecure": ("insecureFlag", "insecure-flag"),
    "datacenters": ("datacenters", "datacenters"),
    "ca_file": ("caFile", "ca-file"),
    "thumbprint": ("thumbprint", "thumbprint"),
    "secret_name": ("secretName", "secret-name"),
    "secret_namespace": ("secretNamespace", "secret-namespace"),
    "soap_roundtrip_count": ("soapRoundtripCount", "soap-roundtrip-count"),
    "ip_family": ("ipFamily", "ip-family"),
}
_NODES_KEYS = {
    "internal_subnets": ("internalNetworkSubnetCidr", "internal-network-subnet-cidr"),
    "external_subnets": ("externalNetworkSubnetCidr", "external-network-subnet-cidr"),
    "exclude_internal_subnets": (
        "excludeInternalNetworkSubnetCidr",
        "exclude-internal-network-subnet-cidr",
    ),
    "exclude_external_subnets": (
        "excludeExternalNetworkSubnetCidr",
        "exclude-external-network-subnet-cidr",
    ),
    "internal_network_names": ("internalVmNetworkName", "internal-vm-network-name"),
    "external_network_names": ("externalVmNetworkName", "external-vm-network-name"),
}


def _split(value: Any) -> tuple[str, ...]:
    """A list or a comma-separated string (INI, and Deckhouse's joined network names)."""
    if value is None or value == "":
        return ()
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return tuple(str(v).strip() for v in items if str(v).strip())


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{key}: {value!r} is not a boolean")


def _int(key: str, value: Any) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: {value!r} is not a number") from None


def _connection(raw: Mapping[str, Any], ini: bool) -> dict[str, Any]:
    """The connection keys ``raw`` sets, as :class:`VcenterConfig` field values."""
    values: dict[str, Any] = {}
    for name, (yaml_key, ini_key) in _CONNECTION_KEYS.items():
        key = ini_key if ini else yaml_key
        if key not in raw or raw[key] is None:
            continue
        value = raw[key]
        if name == "port" or name == "soap_roundtrip_count":
            values[name] = _int(key, value)
        elif name == "insecure":
            values[name] = _bool(key, value)
        elif name in ("datacenters", "ip_family"):
            values[name] = _split(value)
        else:
            values[name] = str(value).strip()
    return values


def _nodes(raw: Mapping[str, Any], ini: bool) -> NodesConfig:
    values = {}
    for name, (yaml_key, ini_key) in _NODES_KEYS.items():
        key = ini_key if ini else yaml_key
        values[name] = _split(raw.get(key))
    return NodesConfig(**values)


def _build(
    global_raw: Mapping[str, Any],
    vcenters_raw: Sequence[tuple[str, Mapping[str, Any]]],
    labels: Mapping[str, Any],
    nodes: Mapping[str, Any],
    *,
    ini: bool,
) -> CloudConfig:
    inherited = _connection(global_raw, ini)
    secrets_directory = str(
        global_raw.get("secrets-directory" if ini else "secretsDirectory") or ""
    ).strip()
    vcenters: list[VcenterConfig] = []
    for label, raw in vcenters_raw:
        own = _connection(raw, ini)
        server = own.get("server") or (label if ini else "") or inherited.get("server", "")
        if not server:
            raise ConfigError(f"vcenter {label!r}: server is not set")
        merged = {**inherited, **own, "server": server}
        vcenters.append(VcenterConfig(**merged))
    if not vcenters and inherited.get("server"):
        vcenters.append(VcenterConfig(**inherited))
    config = CloudConfig(
        vcenters=tuple(vcenters),
        region_category=str(labels.get("region") or "").strip(),
        zone_category=str(labels.get("zone") or "").strip(),
        nodes=_nodes(nodes, ini),
        secrets_directory=secrets_directory,
    )
    validate(config)
    return config


def validate(config: CloudConfig) -> None:
    """Upstream's ``validateConfig``: credentials present, Secret and directory exclusive."""
    for vc in config.vcenters:
        if vc.secret_name and config.secrets_directory:
            raise ConfigError(
                f"vcenter {vc.server}: secretName and secretsDirectory exclude each other"
            )
        if not vc.secret_name and not config.secrets_directory and not (vc.user and vc.password):
            raise ConfigError(
                f"vcenter {vc.server}: user and password are required when no secret is set"
            )
        for family in vc.ip_family:
            if family not in ("ipv4", "ipv6"):
                raise ConfigError(f"vcenter {vc.server}: ipFamily {family!r} is not ipv4/ipv6")


def _parse_yaml(text: str) -> CloudConfig | None:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict) or not {"global", "vcenter", "labels", "nodes"} & set(doc):
        return None
    vcenter = doc.get("vcenter") or {}
    if not isinstance(vcenter, dict):
        raise ConfigError("vcenter: must be a map of tenant name to settings")
    return _build(
        doc.get("global") or {},
        [(str(k), v or {}) for k, v in vcenter.items()],
        doc.get("labels") or {},
        doc.get("nodes") or {},
        ini=False,
    )


_VC_SECTION = re.compile(r'^virtualcenter\s+"?([^"]+)"?$', re.IGNORECASE)


def _parse_ini(text: str) -> CloudConfig:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str.lower  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        raise ConfigError(f"neither YAML nor INI: {exc.message.splitlines()[0]}") from None

    def section(name: str) -> dict[str, str]:
        for candidate in parser.sections():
            if candidate.lower() == name:
                return {k: v.strip().strip('"') for k, v in parser[candidate].items()}
        return {}

    vcenters = []
    for name in parser.sections():
        match = _VC_SECTION.match(name.strip())
        if match:
            values = {k: v.strip().strip('"') for k, v in parser[name].items()}
            vcenters.append((match.group(1).strip(), values))
    return _build(section("global"), vcenters, section("labels"), section("nodes"), ini=True)


def parse_cloud_config(text: str) -> CloudConfig:
    """``vsphere.conf`` in YAML, else INI (as the CPI's ``ReadConfig``)."""
    parsed = _parse_yaml(text)
    return parsed if parsed is not None else _parse_ini(text)


def apply_env(config: CloudConfig, environ: Mapping[str, str] | None = None) -> CloudConfig:
    """Upstream's ``VSPHERE_*`` environment overrides (``FromEnv``) on top of the file."""
    env = os.environ if environ is None else environ
    overrides: dict[str, Any] = {}
    for variable, name in (
        ("VSPHERE_VCENTER", "server"),
        ("VSPHERE_USER", "user"),
        ("VSPHERE_PASSWORD", "password"),
        ("VSPHERE_CAFILE", "ca_file"),
        ("VSPHERE_THUMBPRINT", "thumbprint"),
        ("VSPHERE_SECRET_NAME", "secret_name"),
        ("VSPHERE_SECRET_NAMESPACE", "secret_namespace"),
    ):
        if env.get(variable):
            overrides[name] = env[variable]
    if env.get("VSPHERE_VCENTER_PORT"):
        overrides["port"] = _int("VSPHERE_VCENTER_PORT", env["VSPHERE_VCENTER_PORT"])
    if env.get("VSPHERE_INSECURE"):
        overrides["insecure"] = _bool("VSPHERE_INSECURE", env["VSPHERE_INSECURE"])
    if env.get("VSPHERE_DATACENTER"):
        overrides["datacenters"] = _split(env["VSPHERE_DATACENTER"])
    if env.get("VSPHERE_IP_FAMILY"):
        overrides["ip_family"] = _split(env["VSPHERE_IP_FAMILY"])
    vcenters = list(config.vcenters)
    if overrides:
        if vcenters:
            first = vcenters[0]
            vcenters[0] = replace(first, **overrides)
        elif "server" in overrides:
            vcenters.append(VcenterConfig(**overrides))
    result = replace(
        config,
        vcenters=tuple(vcenters),
        region_category=env.get("VSPHERE_LABEL_REGION") or config.region_category,
        zone_category=env.get("VSPHERE_LABEL_ZONE") or config.zone_category,
        secrets_directory=env.get("VSPHERE_SECRETS_DIRECTORY") or config.secrets_directory,
    )
    if overrides or env.get("VSPHERE_SECRETS_DIRECTORY"):
        validate(result)
    return result


# -- the credentials Secret -----------------------------------------------------------------
def _read(path: Path) -> str:
    return path.read_text().strip()


def read_credentials(directory: Path, server: str) -> tuple[str, str] | None:
    """``<server>.username``/``<server>.password`` (or the IPv6 form ``server_<x>``,
    ``username_<x>``, ``password_<x>``) from the mounted credentials Secret; ``None`` when the
    Secret has no entry for ``server``. Read anew on every call (rotation is picked up)."""
    user, password = directory / f"{server}.username", directory / f"{server}.password"
    if user.exists() and password.exists():
        return _read(user), _read(password)
    for candidate in sorted(directory.glob("server_*")):
        suffix = candidate.name[len("server_") :]
        if _read(candidate) == server:
            user, password = directory / f"username_{suffix}", directory / f"password_{suffix}"
            if user.exists() and password.exists():
                return _read(user), _read(password)
    return None
