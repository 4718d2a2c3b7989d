"""The vSphere configuration without a stack: ``vsphere.conf`` in YAML and INI, the ``VSPHERE_*``
environment, the credentials Secret (both key formats) and how Deckhouse's fields win over the
file — each case checked against cloud-provider-vsphere's ``pkg/common/config`` and
``pkg/common/credentialmanager`` behaviour."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from cloudloop.cloud.vsphere.config import (
    CloudConfig,
    ConfigError,
    Credentials,
    NodesConfig,
    VcenterConfig,
    apply_env,
    parse_cloud_config,
    parse_credentials,
    read_credentials,
)
from cloudloop.cloud.vsphere.settings import VsphereSettings, resolve


@pytest.fixture(autouse=True)
def no_vsphere_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's environment never leaks into a case (``resolve`` reads ``os.environ``)."""
    for key in list(os.environ):
        if key.startswith(("VSPHERE_", "VCENTER_")):
            monkeypatch.delenv(key)
    yield


def only(config: CloudConfig) -> VcenterConfig:
    (vc,) = config.vcenters
    return vc


# -- YAML ---------------------------------------------------------------------------------------
BASIC_YAML = """
global:
  server: 0.0.0.0
  port: 443
  user: user
  password: password
  insecureFlag: true
  datacenters:
    - us-west
  caFile: /some/path/to/a/ca.pem
"""

TENANTS_YAML = """
global:
  port: 8443
  insecureFlag: true
  user: global-user
  password: global-password
  datacenters: [dc-global]
  soapRoundtripCount: 5
  ipFamily: [IPv4, ipv6]
vcenter:
  tenant1:
    server: 10.0.0.1
    datacenters: [vic0dc]
    user: own-user
    password: own-password
    insecureFlag: false
    thumbprint: "AB:CD"
"""


def test_yaml_global_server_is_an_implicit_vcenter() -> None:
    vc = only(parse_cloud_config(BASIC_YAML))
    assert (vc.server, vc.tenant, vc.port, vc.insecure) == ("0.0.0.0", "0.0.0.0", 443, True)
    assert (vc.user, vc.password, vc.datacenters) == ("user", "password", ("us-west",))
    assert vc.ca_file == "/some/path/to/a/ca.pem"


def test_yaml_entry_inherits_what_it_does_not_set() -> None:
    vc = only(parse_cloud_config(TENANTS_YAML))
    assert (vc.tenant, vc.server) == ("tenant1", "10.0.0.1")
    assert vc.port == 8443 and vc.soap_roundtrip_count == 5  # inherited
    assert vc.ip_family == ("ipv4", "ipv6")  # inherited, case-folded
    assert (vc.user, vc.password, vc.datacenters) == ("own-user", "own-password", ("vic0dc",))
    assert vc.thumbprint == "AB:CD"
    assert vc.insecure is True  # upstream: false in the entry does not undo the global true


def test_yaml_defaults() -> None:
    vc = only(parse_cloud_config("vcenter:\n  a:\n    server: vc\n    user: u\n    password: p\n"))
    assert (vc.port, vc.soap_roundtrip_count, vc.ip_family, vc.insecure) == (
        443,
        3,
        ("ipv4",),
        False,
    )


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("", {"10.0.0.1", "0.0.0.0"}),
        ("  0.0.0.0:\n    server: 0.0.0.0\n", {"10.0.0.1", "0.0.0.0"}),
        ("", None),
    ],
    ids=["global-server-added", "keyed-by-global-server", "same-host-not-doubled"],
)
def test_yaml_global_server_with_entries(extra: str, expected: set[str] | None) -> None:
    text = (
        "global:\n  server: 0.0.0.0\n  user: u\n  password: p\n"
        "vcenter:\n  t:\n    server: 10.0.0.1\n" + extra
    )
    if expected is None:
        text = text.replace("10.0.0.1", "0.0.0.0")
        expected = {"0.0.0.0"}
    config = parse_cloud_config(text)
    assert {vc.server for vc in config.vcenters} == expected
    assert len(config.vcenters) == len(expected)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("vcenter:\n  t:\n    port: 443\n", "server is not set"),
        ("global:\n  server: vc\n  password: p\n", "user is required"),
        ("global:\n  server: vc\n  user: u\n", "password is required"),
        ("global:\n  server: vc\n  secretName: s\n", "user is required"),
        (
            "global:\n  server: vc\n  secretName: s\n  secretNamespace: ns\n"
            "  secretsDirectory: /etc/cloud/secrets\n",
            "secretName and secretsDirectory exclude each other",
        ),
        ("global: [a, b]\n", "global: must be a mapping"),
        ("vcenter:\n  t: 3\n", "must be a mapping"),
        ("global:\n  server: vc\n  port: https\n", "global.port: not a number"),
        ("global:\n  server: vc\n  insecureFlag: maybe\n", "insecureFlag: not a boolean"),
        ("global:\n  server: vc\n  ipFamily: [ipv5]\n", "not ipv4 or ipv6"),
        ("nodes:\n  internalNetworkSubnetCidr: 10.0.0.0/33\n", "not a CIDR"),
        ("[Global]]\nserver = 0.0.0.0\n", "neither YAML nor INI"),
        ("user: password: \n", "neither YAML nor INI"),
        ("just some text", "neither YAML nor INI"),
    ],
    ids=[
        "entry-without-server",
        "no-user",
        "no-password",
        "secret-without-namespace",
        "secret-and-directory",
        "global-not-a-map",
        "entry-not-a-map",
        "bad-port",
        "bad-bool",
        "bad-ip-family",
        "bad-cidr",
        "bad-ini-section",
        "bad-yaml",
        "plain-text",
    ],
)
def test_bad_configuration_is_refused(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_cloud_config(text)


@pytest.mark.parametrize(
    "text",
    [
        "global:\n  server: vc\n  secretsDirectory: /mnt/secret\n",
        "global:\n  server: vc\n  secretName: s\n  secretNamespace: kube-system\n",
        "vcenter:\n  t:\n    server: vc\n    secretName: s\n    secretNamespace: kube-system\n",
    ],
    ids=["secrets-directory", "global-secret", "entry-secret"],
)
def test_a_secret_makes_user_and_password_optional(text: str) -> None:
    assert only(parse_cloud_config(text)).server == "vc"


def test_credential_sources() -> None:
    config = parse_cloud_config(
        """
global:
  secretName: global-secret
  secretNamespace: kube-system
vcenter:
  own:
    server: 10.0.0.1
    secretName: tenant1-secret
    secretNamespace: kube-system
  shared:
    server: 10.0.0.2
"""
    )
    own, shared = config.vcenters
    assert own.has_secret and not shared.has_secret
    assert config.credential_source(own) == config.credential_source(shared) == "secret"
    assert config.global_secret == "secret"
    by_dir = parse_cloud_config("global:\n  server: vc\n  secretsDirectory: /s\n")
    assert by_dir.credential_source(only(by_dir)) == "directory"
    plain = parse_cloud_config(BASIC_YAML)
    assert plain.credential_source(only(plain)) == "config"


def test_passwords_never_appear_in_errors() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_cloud_config("global:\n  server: vc\n  password: s3cr3t-value\n  port: x\n")
    assert "s3cr3t-value" not in str(caught.value)
    assert "s3cr3t-value" not in repr(
        only(parse_cloud_config(BASIC_YAML.replace("password: password", "password: s3cr3t-value")))
    )


def test_yaml_labels_and_nodes() -> None:
    config = parse_cloud_config(
        """
global: {server: vc, user: u, password: p}
labels:
  region: k8s-region
  zone: k8s-zone
nodes:
  internalNetworkSubnetCidr: "10.0.0.0/8, 192.168.0.0/16"
  externalNetworkSubnetCidr: 172.16.0.0/12
  excludeInternalNetworkSubnetCidr: 10.1.0.0/16
  excludeExternalNetworkSubnetCidr: fd00::/8
  internalVmNetworkName: Internal
  externalVmNetworkName: "External,DMZ"
"""
    )
    assert (config.region_category, config.zone_category) == ("k8s-region", "k8s-zone")
    assert config.nodes == NodesConfig(
        internal_subnets=("10.0.0.0/8", "192.168.0.0/16"),
        external_subnets=("172.16.0.0/12",),
        exclude_internal_subnets=("10.1.0.0/16",),
        exclude_external_subnets=("fd00::/8",),
        internal_network_names=("Internal",),
        external_network_names=("External", "DMZ"),  # Deckhouse's comma-joined names
    )


# -- INI ----------------------------------------------------------------------------------------
BASIC_INI = """
[Global]
server = 0.0.0.0
port = 443
user = user
password = password
insecure-flag = true
datacenters = us-west
ca-file = /some/path/to/a/ca.pem
"""

TENANTS_INI = """
[Global]
port = 443
insecure-flag = true

[VirtualCenter "tenant1"]
server = "10.0.0.1"
datacenters = "vic0dc"
secret-name = "tenant1-secret"
secret-namespace = "kube-system"
# port, insecure-flag will be used from Global section.

[VirtualCenter "10.0.0.3"]
datacenters = "vicdc, vicdc2"
secret-name = "eu-secret"
secret-namespace = "kube-system"
"""


def test_ini_global_section() -> None:
    vc = only(parse_cloud_config(BASIC_INI))
    assert (vc.server, vc.port, vc.insecure, vc.datacenters) == ("0.0.0.0", 443, True, ("us-west",))
    assert (vc.user, vc.password, vc.ca_file) == ("user", "password", "/some/path/to/a/ca.pem")


def test_ini_section_name_is_the_host_unless_server_is_set() -> None:
    tenant1, eu = parse_cloud_config(TENANTS_INI).vcenters
    assert (tenant1.tenant, tenant1.server, tenant1.datacenters) == (
        "tenant1",
        "10.0.0.1",
        ("vic0dc",),
    )
    assert (eu.tenant, eu.server, eu.datacenters) == ("10.0.0.3", "10.0.0.3", ("vicdc", "vicdc2"))
    assert tenant1.insecure and eu.insecure and tenant1.port == eu.port == 443
    assert (eu.secret_namespace, eu.secret_name) == ("kube-system", "eu-secret")


def test_ini_names_are_case_insensitive_and_bare_booleans_true() -> None:
    config = parse_cloud_config(
        """
[GLOBAL]
User = u
PASSWORD = p
insecure-flag
ip-family = ipv6, IPv4

[virtualcenter "vc.example.com"]
Port = 8443

[labels]
region = k8s-region
zone = k8s-zone

[Nodes]
internal-network-subnet-cidr = 10.0.0.0/8
external-vm-network-name = VM Network
exclude-internal-network-subnet-cidr = 10.9.0.0/16
"""
    )
    vc = only(config)
    assert (vc.server, vc.port, vc.user, vc.password) == ("vc.example.com", 8443, "u", "p")
    assert vc.insecure is True
    assert vc.ip_family == ("ipv6", "ipv4")
    assert (config.region_category, config.zone_category) == ("k8s-region", "k8s-zone")
    assert config.nodes.internal_subnets == ("10.0.0.0/8",)
    assert config.nodes.exclude_internal_subnets == ("10.9.0.0/16",)
    assert config.nodes.external_network_names == ("VM Network",)


def test_yaml_and_ini_say_the_same() -> None:
    assert parse_cloud_config(BASIC_YAML) == parse_cloud_config(BASIC_INI)


def test_an_empty_document_names_no_vcenter() -> None:
    assert parse_cloud_config("global: {}\n").vcenters == ()


# -- environment --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "field", "expected"),
    [
        ({"VSPHERE_USER": "env-user"}, "user", "env-user"),
        ({"VSPHERE_PASSWORD": "env-pass"}, "password", "env-pass"),
        ({"VSPHERE_VCENTER": "vc2"}, "server", "vc2"),
        ({"VSPHERE_VCENTER_PORT": "8443"}, "port", 8443),
        ({"VSPHERE_INSECURE": "false"}, "insecure", False),
        ({"VSPHERE_DATACENTER": "a,b"}, "datacenters", ("a", "b")),
        ({"VSPHERE_ROUNDTRIP_COUNT": "7"}, "soap_roundtrip_count", 7),
        ({"VSPHERE_CAFILE": "/ca.pem"}, "ca_file", "/ca.pem"),
        ({"VSPHERE_THUMBPRINT": "AA:BB"}, "thumbprint", "AA:BB"),
    ],
    ids=["user", "password", "server", "port", "insecure", "datacenters", "roundtrips", "ca", "tp"],
)
def test_env_overrides_the_file(env: dict[str, str], field: str, expected: Any) -> None:
    vc = only(apply_env(parse_cloud_config(BASIC_YAML), env))
    assert getattr(vc, field) == expected


def test_env_alone_makes_a_vcenter() -> None:
    env = {"VSPHERE_VCENTER": "vc", "VSPHERE_USER": "u", "VSPHERE_PASSWORD": "p"}
    vc = only(apply_env(CloudConfig(), env))
    assert (vc.server, vc.user, vc.password, vc.port) == ("vc", "u", "p", 443)


def test_env_port_is_not_a_tenant() -> None:
    """Upstream's loop over ``VSPHERE_VCENTER_*`` would make a vCenter named ``8443``."""
    config = apply_env(parse_cloud_config(BASIC_YAML), {"VSPHERE_VCENTER_PORT": "8443"})
    assert [vc.server for vc in config.vcenters] == ["0.0.0.0"]


def test_env_tenant_entry() -> None:
    env = {
        "VSPHERE_VCENTER_MAIN": "main",
        "VCENTER_MAIN_SERVER": "vc.example.com",
        "VCENTER_MAIN_USERNAME": "u",
        "VCENTER_MAIN_PASSWORD": "p",
        "VCENTER_MAIN_PORT": "8443",
        "VCENTER_MAIN_INSECURE": "true",
        "VCENTER_MAIN_DATACENTERS": "DC0",
        "VCENTER_MAIN_IP_FAMILY": "ipv6",
    }
    vc = only(apply_env(CloudConfig(), env))
    assert (vc.tenant, vc.server, vc.user, vc.password, vc.port) == (
        "main",
        "vc.example.com",
        "u",
        "p",
        8443,
    )
    assert (vc.insecure, vc.datacenters, vc.ip_family) == (True, ("DC0",), ("ipv6",))


def test_env_tenant_entry_replaces_the_files_entry_of_that_tenant() -> None:
    config = parse_cloud_config(TENANTS_YAML)
    env = {"VSPHERE_VCENTER_T": "tenant1", "VCENTER_T_SERVER": "10.9.9.9"}
    assert only(apply_env(config, env)).server == "10.9.9.9"


def test_env_labels_secrets_and_nodes() -> None:
    env = {
        "VSPHERE_LABEL_REGION": "region-cat",
        "VSPHERE_LABEL_ZONE": "zone-cat",
        "VSPHERE_SECRET_NAME": "vsphere-cloud-secret",
        "VSPHERE_SECRET_NAMESPACE": "kube-system",
        "VSPHERE_NODES_INTERNAL_NETWORK_SUBNET_CIDR": "10.0.0.0/8",
        "VSPHERE_NODES_EXTERNAL_NETWORK_SUBNET_CIDR": "192.0.2.0/24",
        "VSPHERE_NODES_INTERNAL_VM_NETWORK_NAME": "k8s",
        "VSPHERE_NODES_EXTERNAL_VM_NETWORK_NAME": "public",
    }
    config = apply_env(parse_cloud_config(BASIC_YAML), env)
    assert (config.region_category, config.zone_category) == ("region-cat", "zone-cat")
    assert (config.secret_namespace, config.secret_name) == ("kube-system", "vsphere-cloud-secret")
    assert config.nodes.internal_subnets == ("10.0.0.0/8",)
    assert config.nodes.external_subnets == ("192.0.2.0/24",)
    assert config.nodes.internal_network_names == ("k8s",)
    assert config.nodes.external_network_names == ("public",)


def test_env_secrets_directory_makes_credentials_optional() -> None:
    config = parse_cloud_config("global:\n  server: vc\n", require_credentials=False)
    with pytest.raises(ConfigError, match="user is required"):
        apply_env(config, {})
    assert apply_env(config, {"VSPHERE_SECRETS_DIRECTORY": "/s"}).secrets_directory == "/s"


@pytest.mark.parametrize(
    "env",
    [
        {"VSPHERE_INSECURE": "perhaps"},
        {"VSPHERE_VCENTER_PORT": "-1"},
        {"VSPHERE_NODES_INTERNAL_NETWORK_SUBNET_CIDR": "ten/8"},
    ],
    ids=["bool", "port", "cidr"],
)
def test_bad_env_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        apply_env(parse_cloud_config(BASIC_YAML), env)


# -- the credentials Secret ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "expected", "problems"),
    [
        (
            {"10.20.30.40.username": "user", "10.20.30.40.password": "s3cret-1"},
            {"10.20.30.40": Credentials("user", "s3cret-1")},
            0,
        ),
        (
            {"10.20.30.40.username": "user\n", "10.20.30.40.password": "s3cret-1\n"},
            {"10.20.30.40": Credentials("user", "s3cret-1")},
            0,
        ),
        (
            {
                "vc.example.com.username": "a",
                "vc.example.com.password": "b",
                "10.0.0.2.username": "c",
                "10.0.0.2.password": "d",
            },
            {"vc.example.com": Credentials("a", "b"), "10.0.0.2": Credentials("c", "d")},
            0,
        ),
        (
            {
                "server_0": "fd01::1",
                "username_0": "user",
                "password_0": "s3cret-1",
                "server_foo": "10.0.0.1",
                "username_foo": "userfoo",
                "password_foo": "s3cret-foo",
            },
            {
                "fd01::1": Credentials("user", "s3cret-1"),
                "10.0.0.1": Credentials("userfoo", "s3cret-foo"),
            },
            0,
        ),
        ({"server_0": "fd01::1", "username_0": "user"}, {}, 2),
        ({"server_0": "fd01::1", "password_0": "s3cret-1"}, {}, 2),
        ({"username_1": "user", "password_1": "s3cret-1"}, {}, 2),
        ({"10.20.30.40.password": "s3cret-1"}, {}, 1),
        (
            {"10.0.0.1.username": "u", "10.0.0.1.password": "p", "colour": "blue"},
            {"10.0.0.1": Credentials("u", "p")},
            1,
        ),
        ({"10.0.0.1.vc-session-manager-url": "https://x"}, {}, 0),
    ],
    ids=[
        "dotted",
        "trailing-newline",
        "two-servers",
        "ipv6-alternative",
        "alternative-no-password",
        "alternative-no-username",
        "alternative-no-server",
        "no-username",
        "unknown-key-skipped",
        "session-manager-ignored",
    ],
)
def test_parse_credentials(
    data: dict[str, str], expected: dict[str, Credentials], problems: int
) -> None:
    found, reported = parse_credentials(data)
    assert found == expected
    assert len(reported) == problems, reported
    passwords = [v for k, v in data.items() if "password" in k]
    assert not any(v in p for p in reported for v in passwords)  # key names only


def mount_secret(root: Path, data: dict[str, str]) -> Path:
    """A Secret as kubelet mounts it: files are symlinks into a ``..data`` directory."""
    target = root / "..2026_01_01_00_00_00.000000000"
    target.mkdir(parents=True)
    for key, value in data.items():
        (target / key).write_text(value)
    (root / "..data").symlink_to(target.name)
    for key in data:
        (root / key).symlink_to(Path("..data") / key)
    return root


def test_read_credentials_from_a_mounted_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = mount_secret(
        tmp_path / "secret",
        {
            "vc.example.com.username": "user",
            "vc.example.com.password": "first-pass\n",
            "server_v6": "fd00::1",
            "username_v6": "user6",
            "password_v6": "pass6",
            "stray": "leaked-value",
        },
    )
    with caplog.at_level(logging.WARNING):
        assert read_credentials(secret, "vc.example.com") == ("user", "first-pass")
    assert read_credentials(secret, "fd00::1") == ("user6", "pass6")
    assert read_credentials(secret, "other.example.com") is None
    assert "stray" in caplog.text and "leaked-value" not in caplog.text
    assert "first-pass" not in caplog.text
    (secret / "..data" / "vc.example.com.password").write_text("rotated")
    assert read_credentials(secret, "vc.example.com") == ("user", "rotated")


# -- settings: Deckhouse's fields over the file -------------------------------------------------
def write(tmp_path: Path, text: str, name: str = "vsphere.conf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


NO_DEFAULT_DIR = Path("/nonexistent/cloud/secrets")


def test_deckhouse_fields_win_over_the_file(tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        """
global: {user: file-user, password: file-pass, insecureFlag: true}
vcenter:
  main: {server: file-vc, port: 8443, datacenters: [FileDC]}
labels: {region: file-region, zone: file-zone}
nodes: {internalVmNetworkName: file-net, internalNetworkSubnetCidr: 10.0.0.0/8}
""",
    )
    plain = resolve(VsphereSettings(config_file=conf), default_secrets_dir=NO_DEFAULT_DIR)
    assert (plain.host, plain.port, plain.insecure, plain.datacenters) == (
        "file-vc",
        8443,
        True,
        ("FileDC",),
    )
    assert plain.credentials() == ("file-user", "file-pass")
    assert (plain.region_category, plain.zone_category) == ("file-region", "file-zone")
    over = resolve(
        VsphereSettings(
            config_file=conf,
            server="dh-vc:443",
            username="dh-user",
            password=SecretStr("dh-pass"),
            datacenters=["DhDC"],
            region_tag_category="dh-region",
            zone_tag_category="dh-zone",
            internal_network_names=["dh-net-a", "dh-net-b"],
        ),
        default_secrets_dir=NO_DEFAULT_DIR,
    )
    assert (over.host, over.port, over.datacenters) == ("dh-vc", 443, ("DhDC",))
    assert over.credentials() == ("dh-user", "dh-pass")
    assert (over.region_category, over.zone_category) == ("dh-region", "dh-zone")
    assert over.nodes.internal_network_names == ("dh-net-a", "dh-net-b")
    assert over.nodes.internal_subnets == ("10.0.0.0/8",)  # the file's CIDR stays


def test_deckhouse_alone_and_default_categories() -> None:
    conn = resolve(
        VsphereSettings(server="vc", username="u", password=SecretStr("p")),
        default_secrets_dir=NO_DEFAULT_DIR,
    )
    assert (conn.host, conn.port, conn.url) == ("vc", 443, "https://vc:443")
    assert (conn.region_category, conn.zone_category) == ("k8s-region", "k8s-zone")
    assert conn.nodes == NodesConfig() and conn.ip_families == ("ipv4",)


def test_internal_network_cidr_fills_an_unset_subnet() -> None:
    conn = resolve(
        VsphereSettings(
            server="vc", username="u", password=SecretStr("p"), internal_network_cidr="10.1.0.0/16"
        ),
        default_secrets_dir=NO_DEFAULT_DIR,
    )
    assert conn.nodes.internal_subnets == ("10.1.0.0/16",)


@pytest.mark.parametrize(
    ("server", "host", "port"),
    [
        ("vc", "vc", 443),
        ("vc:8443", "vc", 8443),
        ("[fd00::1]:8443", "fd00::1", 8443),
        ("fd00::1", "fd00::1", 443),
    ],
    ids=["host", "host-port", "ipv6-port", "ipv6"],
)
def test_server_forms(server: str, host: str, port: int) -> None:
    conn = resolve(
        VsphereSettings(server=server, username="u", password=SecretStr("p")),
        default_secrets_dir=NO_DEFAULT_DIR,
    )
    assert (conn.host, conn.port) == (host, port)


def test_credentials_precedence(tmp_path: Path) -> None:
    conf = write(tmp_path, "global: {server: vc, user: file-user, password: file-pass}\n")
    secret = mount_secret(tmp_path / "secret", {"vc.username": "s-user", "vc.password": "s-pass"})
    password_file = write(tmp_path, "file-secret\n", "password")

    def creds(**fields: Any) -> tuple[str, str]:
        settings = VsphereSettings(config_file=conf, **fields)
        return resolve(settings, default_secrets_dir=NO_DEFAULT_DIR).credentials()

    assert creds() == ("file-user", "file-pass")
    assert creds(credentials_dir=secret) == ("s-user", "s-pass")
    assert creds(credentials_dir=secret, password=SecretStr("x")) == ("file-user", "x")
    assert creds(password=SecretStr("x"), password_file=password_file) == (
        "file-user",
        "file-secret",
    )


def test_secrets_directory_of_the_file(tmp_path: Path) -> None:
    secret = mount_secret(tmp_path / "secret", {"vc.username": "s-user", "vc.password": "s-pass"})
    conf = write(tmp_path, f"global:\n  server: vc\n  secretsDirectory: {secret}\n")
    conn = resolve(VsphereSettings(config_file=conf), default_secrets_dir=NO_DEFAULT_DIR)
    assert conn.credentials() == ("s-user", "s-pass")


def test_named_secret_is_read_from_the_default_directory(tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        "global:\n  server: vc\n  secretName: vsphere-cloud-secret\n"
        "  secretNamespace: kube-system\n",
    )
    with pytest.raises(ConfigError, match="kube-system/vsphere-cloud-secret: mount the Secret"):
        resolve(VsphereSettings(config_file=conf), default_secrets_dir=NO_DEFAULT_DIR)
    secret = mount_secret(tmp_path / "secrets", {"vc.username": "s-user", "vc.password": "p"})
    conn = resolve(VsphereSettings(config_file=conf), default_secrets_dir=secret)
    assert conn.credentials() == ("s-user", "p")


def test_secret_without_an_entry_for_the_server(tmp_path: Path) -> None:
    secret = mount_secret(tmp_path / "secret", {"other.username": "u", "other.password": "p"})
    conn = resolve(
        VsphereSettings(server="vc", credentials_dir=secret), default_secrets_dir=NO_DEFAULT_DIR
    )
    with pytest.raises(ConfigError, match="no entry for vc"):
        conn.credentials()


@pytest.mark.parametrize(
    ("fields", "conf", "match"),
    [
        ({}, None, "no vCenter"),
        ({"server": "vc", "insecure": True, "ca_bundle": Path("/ca.pem")}, None, "exclude"),
        (
            {},
            "vcenter:\n  a: {server: vc1, user: u, password: p}\n"
            "  b: {server: vc2, user: u, password: p}\n",
            "more than one vCenter",
        ),
    ],
    ids=["nothing", "ca-and-insecure", "two-vcenters"],
)
def test_refused_settings(
    tmp_path: Path, fields: dict[str, Any], conf: str | None, match: str
) -> None:
    if conf is not None:
        fields["config_file"] = write(tmp_path, conf)
    with pytest.raises(ConfigError, match=match):
        resolve(VsphereSettings(**fields), default_secrets_dir=NO_DEFAULT_DIR)


def test_tls_options(tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        "global: {server: vc, user: u, password: p, insecureFlag: true, caFile: /f.pem, "
        "thumbprint: 'AA:BB'}\n",
    )
    from_file = resolve(VsphereSettings(config_file=conf), default_secrets_dir=NO_DEFAULT_DIR)
    assert (from_file.insecure, from_file.ca_file, from_file.thumbprint) == (
        True,
        Path("/f.pem"),
        "AA:BB",
    )
    with_bundle = resolve(
        VsphereSettings(config_file=conf, ca_bundle=Path("/dh.pem"), thumbprint="CC:DD"),
        default_secrets_dir=NO_DEFAULT_DIR,
    )
    assert (with_bundle.insecure, with_bundle.ca_file, with_bundle.thumbprint) == (
        False,
        Path("/dh.pem"),
        "CC:DD",
    )


def test_env_reaches_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = write(tmp_path, BASIC_YAML)
    monkeypatch.setenv("VSPHERE_LABEL_ZONE", "env-zone")
    monkeypatch.setenv("VSPHERE_USER", "env-user")
    conn = resolve(VsphereSettings(config_file=conf), default_secrets_dir=NO_DEFAULT_DIR)
    assert conn.zone_category == "env-zone" and conn.credentials() == ("env-user", "password")
