"""The vSphere CPI's ``vsphere.conf`` (YAML, else INI) and its credentials Secret, parsed.

:func:`parse_cloud_config` reads upstream's two formats into one :class:`CloudConfig`;
:func:`apply_env` applies upstream's ``VSPHERE_*`` overrides; :func:`parse_credentials` and
:func:`read_credentials` read the credentials Secret (``<server>.username`` or ``server_<x>``).
Upstream's rules, the variables read and the departures:
docs/decisions/0045-vsphere-configuration-and-lookups-as-upstream.md.

Rules (as cloud-provider-vsphere ``pkg/common/config`` and ``pkg/common/credentialmanager``):
- YAML is tried first; a document that is not a YAML mapping with known keys is read as INI. A
  YAML section that is not a mapping, a bad number, boolean, CIDR or IP family is a
  :class:`ConfigError` naming the key.
- ``global`` connection keys are inherited by each vCenter entry that does not set them.
- Credentials: an entry's own Secret, else the global Secret *or* ``secretsDirectory`` (not both),
  else ``user``/``password`` (``require_credentials``).
- Secret files are read anew at every call (a rotated Secret is picked up); incomplete sets and
  unknown keys are reported by key name and skipped, the rest still counts.
- Errors never contain passwords.
"""

from __future__ import annotations

import configparser
import ipaddress
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

DEFAULT_PORT = 443
DEFAULT_ROUNDTRIPS = 3
IP_FAMILIES = ("ipv4", "ipv6")


class ConfigError(ValueError):
    """The vSphere configuration is invalid (the message names the key)."""


@dataclass(frozen=True)
class VcenterConfig:
    """One ``vcenter`` entry after inheriting from ``global``."""

    server: str
    #: The YAML map key, the INI section name, or the server of the implicit entry.
    tenant: str = ""
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
    def has_secret(self) -> bool:
        """The entry names its own Secret (upstream needs both name and namespace)."""
        return bool(self.secret_name and self.secret_namespace)

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
    #: The global Secret (``global.secretName``/``secretNamespace``).
    secret_name: str = ""
    secret_namespace: str = ""

    @property
    def global_secret(self) -> str:
        """Upstream's ``isSecretInfoProvided``: ``"secret"`` (name and namespace, no
        directory), ``"directory"`` (a directory, no Secret) or ``""`` (none, or both)."""
        named = bool(self.secret_name and self.secret_namespace)
        partly_named = bool(self.secret_name or self.secret_namespace)
        if named and not self.secrets_directory:
            return "secret"
        if not partly_named and self.secrets_directory:
            return "directory"
        return ""

    def credential_source(self, vc: VcenterConfig) -> str:
        """Where ``vc``'s credentials come from: ``"secret"`` (a named Secret, the entry's or
        the global one), ``"directory"`` (``secretsDirectory``) or ``"config"``."""
        if vc.has_secret:
            return "secret"
        return self.global_secret or "config"


# -- key tables: field → (YAML name, INI name) ---------------------------------------------------
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
_CIDR_FIELDS = (
    "internal_subnets",
    "external_subnets",
    "exclude_internal_subnets",
    "exclude_external_subnets",
)
_SECTIONS = ("global", "vcenter", "labels", "nodes")


def _split(value: Any) -> tuple[str, ...]:
    """A list or a comma-separated string (INI, and Deckhouse's joined network names)."""
    if value is None or value == "":
        return ()
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return tuple(str(v).strip() for v in items if str(v).strip())


def _bool(key: str, value: Any) -> bool:
    """gcfg's and Go's ``ParseBool`` spellings; ``None`` is a bare INI key (true)."""
    if value is None or isinstance(value, bool):
        return value is None or bool(value)
    text = str(value).strip().lower()
    if text in ("1", "t", "true", "yes", "y", "on"):
        return True
    if text in ("0", "f", "false", "no", "n", "off", ""):
        return False
    raise ConfigError(f"{key}: not a boolean")


def _int(key: str, value: Any) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: not a number") from None
    if number < 0:
        raise ConfigError(f"{key}: negative")
    return number


def _families(key: str, value: Any) -> tuple[str, ...]:
    families = tuple(f.lower() for f in _split(value))
    for family in families:
        if family not in IP_FAMILIES:
            raise ConfigError(f"{key}: not ipv4 or ipv6")
    return families


def _mapping(key: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: must be a mapping, not {type(value).__name__}")
    return value


def _connection(raw: Mapping[str, Any], ini: bool, where: str) -> dict[str, Any]:
    """The connection keys ``raw`` sets, as :class:`VcenterConfig` field values."""
    values: dict[str, Any] = {}
    for name, (yaml_key, ini_key) in _CONNECTION_KEYS.items():
        key = ini_key if ini else yaml_key
        if key not in raw or (raw[key] is None and not (ini and name == "insecure")):
            continue
        value, label = raw[key], f"{where}.{key}"
        if name in ("port", "soap_roundtrip_count"):
            number = _int(label, value)
            if number:  # 0 means "not set" upstream (inherit, then the default)
                values[name] = number
        elif name == "insecure":
            values[name] = _bool(label, value)
        elif name == "datacenters":
            values[name] = _split(value)
        elif name == "ip_family":
            values[name] = _families(label, value)
        else:
            values[name] = str(value).strip()
    return values


def _check_cidrs(nodes: NodesConfig) -> None:
    for name in _CIDR_FIELDS:
        for cidr in getattr(nodes, name):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ConfigError(f"nodes.{_NODES_KEYS[name][0]}: not a CIDR") from None


def _nodes(raw: Mapping[str, Any], ini: bool) -> NodesConfig:
    values = {}
    for name, (yaml_key, ini_key) in _NODES_KEYS.items():
        values[name] = _split(raw.get(ini_key if ini else yaml_key))
    nodes = NodesConfig(**values)
    _check_cidrs(nodes)
    return nodes


def _build(
    global_raw: Mapping[str, Any],
    vcenters_raw: Sequence[tuple[str, Mapping[str, Any]]],
    labels: Mapping[str, Any],
    nodes: Mapping[str, Any],
    *,
    ini: bool,
    require_credentials: bool,
) -> CloudConfig:
    inherited = _connection(global_raw, ini, "global")
    vcenters: list[VcenterConfig] = []
    for tenant, raw in vcenters_raw:
        own = _connection(raw, ini, f"vcenter {tenant!r}")
        server = own.get("server") or (tenant if ini else "")
        if not server:
            raise ConfigError(f"vcenter {tenant!r}: server is not set")
        merged = {**inherited, **own, "server": server, "tenant": tenant}
        merged["insecure"] = bool(own.get("insecure")) or bool(inherited.get("insecure"))
        if not (own.get("secret_name") and own.get("secret_namespace")):
            merged.pop("secret_name", None)  # the global Secret stays global
            merged.pop("secret_namespace", None)
        vcenters.append(VcenterConfig(**merged))
    global_server = inherited.get("server", "")
    if global_server and not any(
        vc.tenant == global_server or vc.server == global_server for vc in vcenters
    ):
        implicit = {k: v for k, v in inherited.items() if not k.startswith("secret_")}
        vcenters.append(VcenterConfig(**{**implicit, "tenant": global_server}))
    config = CloudConfig(
        vcenters=tuple(vcenters),
        region_category=str(labels.get("region") or "").strip(),
        zone_category=str(labels.get("zone") or "").strip(),
        nodes=_nodes(nodes, ini),
        secrets_directory=str(
            global_raw.get("secrets-directory" if ini else "secretsDirectory") or ""
        ).strip(),
        secret_name=inherited.get("secret_name", ""),
        secret_namespace=inherited.get("secret_namespace", ""),
    )
    if require_credentials:
        validate(config)
    return config


def validate(config: CloudConfig) -> None:
    """Upstream's ``validateConfig``: every vCenter has a credential source."""
    for vc in config.vcenters:
        if config.credential_source(vc) != "config":
            continue
        if not vc.user or not vc.password:
            missing = "user" if not vc.user else "password"
            both = (config.secret_name or config.secret_namespace) and config.secrets_directory
            hint = " (secretName and secretsDirectory exclude each other)" if both else ""
            raise ConfigError(
                f"vcenter {vc.tenant or vc.server}: {missing} is required when no secret is "
                f"set{hint}"
            )


def _parse_yaml(text: str, require_credentials: bool) -> CloudConfig | None:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict) or not set(_SECTIONS) & set(doc):
        return None
    vcenter = _mapping("vcenter", doc.get("vcenter"))
    return _build(
        _mapping("global", doc.get("global")),
        [(str(k), _mapping(f"vcenter {k!r}", v)) for k, v in vcenter.items()],
        _mapping("labels", doc.get("labels")),
        _mapping("nodes", doc.get("nodes")),
        ini=False,
        require_credentials=require_credentials,
    )


_VC_SECTION = re.compile(r'^virtualcenter\s+"?([^"]+)"?$', re.IGNORECASE)


def _parse_ini(text: str, require_credentials: bool) -> CloudConfig:
    parser = configparser.ConfigParser(interpolation=None, strict=False, allow_no_value=True)
    parser.optionxform = str.lower  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        raise ConfigError(f"neither YAML nor INI: {exc.message.splitlines()[0]}") from None

    def values(name: str) -> dict[str, str | None]:
        return {
            k: (v.strip().strip('"') if v is not None else None) for k, v in parser[name].items()
        }

    def section(name: str) -> dict[str, str | None]:
        for candidate in parser.sections():
            if candidate.strip().lower() == name:
                return values(candidate)
        return {}

    vcenters = []
    for name in parser.sections():
        if "[" in name or "]" in name or name.count('"') % 2:
            raise ConfigError(f"neither YAML nor INI: bad section header [{name}]")
        match = _VC_SECTION.match(name.strip())
        if match:
            vcenters.append((match.group(1).strip(), values(name)))
        elif name.strip().lower() not in ("global", "labels", "nodes"):
            log.warning("vsphere: vsphere.conf section [%s] is not known; ignored", name)
    return _build(
        section("global"),
        vcenters,
        section("labels"),
        section("nodes"),
        ini=True,
        require_credentials=require_credentials,
    )


def parse_cloud_config(text: str, *, require_credentials: bool = True) -> CloudConfig:
    """``vsphere.conf`` in YAML, else INI (as the CPI's ``ReadConfig``). With
    ``require_credentials=False`` an entry may lack credentials (the caller supplies them)."""
    parsed = _parse_yaml(text, require_credentials)
    return parsed if parsed is not None else _parse_ini(text, require_credentials)


# -- the environment ------------------------------------------------------------------------
_GLOBAL_ENV = {
    "VSPHERE_VCENTER": "server",
    "VSPHERE_VCENTER_PORT": "port",
    "VSPHERE_USER": "user",
    "VSPHERE_PASSWORD": "password",
    "VSPHERE_DATACENTER": "datacenters",
    "VSPHERE_INSECURE": "insecure",
    "VSPHERE_ROUNDTRIP_COUNT": "soap_roundtrip_count",
    "VSPHERE_CAFILE": "ca_file",
    "VSPHERE_THUMBPRINT": "thumbprint",
}
_TENANT_ENV = {
    "SERVER": "server",
    "USERNAME": "user",
    "PASSWORD": "password",
    "PORT": "port",
    "INSECURE": "insecure",
    "DATACENTERS": "datacenters",
    "ROUNDTRIP": "soap_roundtrip_count",
    "CAFILE": "ca_file",
    "THUMBPRINT": "thumbprint",
    "SECRET_NAME": "secret_name",
    "SECRET_NAMESPACE": "secret_namespace",
    "IP_FAMILY": "ip_family",
}
_NODES_ENV = {
    "VSPHERE_NODES_INTERNAL_NETWORK_SUBNET_CIDR": "internal_subnets",
    "VSPHERE_NODES_EXTERNAL_NETWORK_SUBNET_CIDR": "external_subnets",
    "VSPHERE_NODES_INTERNAL_VM_NETWORK_NAME": "internal_network_names",
    "VSPHERE_NODES_EXTERNAL_VM_NETWORK_NAME": "external_network_names",
}


def _env_value(name: str, key: str, value: str) -> Any:
    if name in ("port", "soap_roundtrip_count"):
        return _int(key, value)
    if name == "insecure":
        return _bool(key, value)
    if name == "datacenters":
        return _split(value)
    if name == "ip_family":
        return _families(key, value)
    return value


def _tenant_entries(
    env: Mapping[str, str], defaults: Mapping[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """``VSPHERE_VCENTER_<ID>=<tenant>`` with its ``VCENTER_<ID>_*`` keys."""
    entries = []
    for key in sorted(env):
        if not key.startswith("VSPHERE_VCENTER_") or key == "VSPHERE_VCENTER_PORT":
            continue
        tenant = env[key].strip()
        ident = key[len("VSPHERE_VCENTER_") :]
        if not tenant or not ident:
            continue
        values: dict[str, Any] = {**defaults, "server": tenant, "tenant": tenant}
        for suffix, name in _TENANT_ENV.items():
            variable = f"VCENTER_{ident}_{suffix}"
            if env.get(variable):
                values[name] = _env_value(name, variable, env[variable])
        entries.append((tenant, values))
    return entries


def apply_env(
    config: CloudConfig,
    environ: Mapping[str, str] | None = None,
    *,
    require_credentials: bool = True,
) -> CloudConfig:
    """Upstream's ``VSPHERE_*`` environment overrides (``FromEnv``) on top of the file."""
    env = os.environ if environ is None else environ
    overrides: dict[str, Any] = {
        name: _env_value(name, variable, env[variable])
        for variable, name in _GLOBAL_ENV.items()
        if env.get(variable)
    }
    vcenters = list(config.vcenters)
    if overrides:
        if vcenters:
            vcenters[0] = replace(vcenters[0], **overrides)
        elif "server" in overrides:
            vcenters.append(VcenterConfig(**overrides, tenant=overrides["server"]))
    defaults = {k: v for k, v in overrides.items() if k != "server"}
    for tenant, values in _tenant_entries(env, defaults):
        index = next((i for i, vc in enumerate(vcenters) if vc.tenant == tenant), None)
        if index is None:
            vcenters.append(VcenterConfig(**values))
        else:
            vcenters[index] = replace(vcenters[index], **values)
    nodes_env = {name: _split(env[var]) for var, name in _NODES_ENV.items() if env.get(var)}
    nodes = replace(config.nodes, **nodes_env)
    _check_cidrs(nodes)
    result = replace(
        config,
        vcenters=tuple(vcenters),
        nodes=nodes,
        region_category=env.get("VSPHERE_LABEL_REGION") or config.region_category,
        zone_category=env.get("VSPHERE_LABEL_ZONE") or config.zone_category,
        secrets_directory=env.get("VSPHERE_SECRETS_DIRECTORY") or config.secrets_directory,
        secret_name=env.get("VSPHERE_SECRET_NAME") or config.secret_name,
        secret_namespace=env.get("VSPHERE_SECRET_NAMESPACE") or config.secret_namespace,
    )
    if require_credentials:
        validate(result)
    return result


# -- the credentials Secret -----------------------------------------------------------------
@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)


_SERVER_PREFIX, _USERNAME_PREFIX, _PASSWORD_PREFIX = "server_", "username_", "password_"
#: Keys upstream knows but cloudloop does not use (vCenter session manager).
_IGNORED_SUFFIXES = (".vc-session-manager-url", ".vc-session-manager-token")


def _value(raw: str) -> str:
    return raw[:-1] if raw.endswith("\n") else raw


def parse_credentials(data: Mapping[str, str]) -> tuple[dict[str, Credentials], list[str]]:
    """The Secret's ``{server: Credentials}`` and its problems (by key name, never by value)."""
    partial: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    rest: dict[str, str] = {}
    for key, raw in data.items():
        if key.endswith("password") and "." in key and key.rsplit(".", 1)[1] == "password":
            partial.setdefault(key[: -len(".password")], {})["password"] = _value(raw)
        elif key.endswith("username") and "." in key and key.rsplit(".", 1)[1] == "username":
            partial.setdefault(key[: -len(".username")], {})["username"] = _value(raw)
        elif key.endswith(_IGNORED_SUFFIXES):
            continue
        else:
            rest[key] = raw
    for key in sorted(k for k in rest if k.startswith(_SERVER_PREFIX)):
        suffix = key[len(_SERVER_PREFIX) :]
        if not suffix:
            problems.append(f"{key}: no identifier after {_SERVER_PREFIX!r}")
            rest.pop(key)
            continue
        server = _value(rest.pop(key)).strip()
        user_key, password_key = _USERNAME_PREFIX + suffix, _PASSWORD_PREFIX + suffix
        entry = partial.setdefault(server, {})
        for name, wanted in (("username", user_key), ("password", password_key)):
            if wanted in rest:
                entry[name] = _value(rest.pop(wanted))
            else:
                problems.append(f"{wanted} is missing for {key}")
    for key in sorted(rest):
        if key.startswith((_USERNAME_PREFIX, _PASSWORD_PREFIX)):
            prefix = _USERNAME_PREFIX if key.startswith(_USERNAME_PREFIX) else _PASSWORD_PREFIX
            problems.append(f"{key} has no matching {_SERVER_PREFIX}{key[len(prefix) :]}")
        else:
            problems.append(f"{key}: unknown key")
    found: dict[str, Credentials] = {}
    for server, entry in partial.items():
        if entry.get("username") and entry.get("password"):
            found[server] = Credentials(entry["username"], entry["password"])
        else:
            problems.append(f"{server}: username or password is missing")
    return found, problems


def read_secret_dir(directory: Path) -> dict[str, str]:
    """A mounted Secret's keys and values (subdirectories such as ``..data`` skipped)."""
    data: dict[str, str] = {}
    for path in sorted(directory.iterdir()):
        if path.is_dir() or path.name.startswith(".."):
            continue
        data[path.name] = path.read_text()
    return data


def read_credentials(directory: Path, server: str) -> tuple[str, str] | None:
    """``server``'s username and password from the mounted credentials Secret; ``None`` when the
    Secret has no complete entry for it. Read anew on every call (rotation is picked up)."""
    found, problems = parse_credentials(read_secret_dir(directory))
    for problem in problems:
        log.warning("vsphere: credentials Secret in %s: %s", directory, problem)
    credentials = found.get(server)
    return (credentials.username, credentials.password) if credentials is not None else None
