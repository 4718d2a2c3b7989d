"""Upstream's configuration files as settings: ``cloud.conf`` (gcfg) and Deckhouse's YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudloop.cloud.openstack.config import (
    ConfigError,
    parse_cloud_conf,
    parse_cluster_configuration,
    resolve,
)
from cloudloop.cloud.openstack.registration import registration_secrets
from cloudloop.cloud.openstack.settings import ConnectionSettings, OpenStackSettings

#: As Deckhouse renders it (``templates/cloud-controller-manager/secret.yaml``), plus extras.
CLOUD_CONF = """
[Global]
auth-url = "https://keystone.example.com:5000/v3/"
domain-name = "default"
tenant-name = "kube"
username = "ccm"
password = "p@ss \\"quoted\\" ; not a comment"
region = "RegionOne"
ca-file = /etc/config/ca.crt
[Networking]
public-network-name = "public"
public-network-name = "public-2"
internal-network-name = "kube"   ; the nodes' network
ipv6-support-disabled = true
address-sort-order = "10.0.0.0/8, 192.168.0.0/16"
[LoadBalancer]
create-monitor = "true"
monitor-delay = "2s"
monitor-timeout = "1s"
subnet-id = "sub-1"
floating-network-id = "net-ext"
enable-ingress-hostname = true
cascade-delete = false
# a comment line
unknown-key = ignored
[LoadBalancerClass "internal"]
subnet-id = "sub-internal"
floating-network-id = ""
[Route]
router-id = "r-1"
[BlockStorage]
rescan-on-resize = true
node-volume-attach-limit = 128
[Metadata]
request-timeout = 1m
[Unknown]
whatever = 1
"""


def test_cloud_conf_as_deckhouse_renders_it(tmp_path: Path) -> None:
    conf = tmp_path / "cloud.conf"
    conf.write_text(CLOUD_CONF)
    settings = resolve(OpenStackSettings(cloud_config_file=conf))
    c = settings.connection
    assert (c.auth_url, c.domain_name, c.tenant_name, c.username, c.region) == (
        "https://keystone.example.com:5000/v3/",
        "default",
        "kube",
        "ccm",
        "RegionOne",
    )
    assert c.password_value() == 'p@ss "quoted" ; not a comment'
    assert str(c.ca_file) == "/etc/config/ca.crt"
    assert settings.networking.public_network_names == ["public", "public-2"]
    assert settings.networking.internal_network_names == ["kube"]
    assert settings.networking.ipv6_support_disabled is True
    assert settings.networking.address_sort_order == ["10.0.0.0/8", "192.168.0.0/16"]
    lb = settings.load_balancer
    assert (lb.create_monitor, lb.monitor_delay_s, lb.monitor_timeout_s) == (True, 2, 1)
    assert (lb.subnet_id, lb.floating_network_id) == ("sub-1", "net-ext")
    assert lb.enable_ingress_hostname is True and lb.cascade_delete is False
    assert lb.classes["internal"].subnet_id == "sub-internal"
    assert settings.route.router_id == "r-1"
    assert settings.block_storage.rescan_on_resize is True
    assert settings.block_storage.node_volume_attach_limit == 128
    assert settings.request_timeout_s == 60
    assert "p@ss" not in repr(settings)


def test_cloud_conf_wins_over_settings_and_is_read_again(tmp_path: Path) -> None:
    conf = tmp_path / "cloud.conf"
    conf.write_text("[Global]\nregion = A\n")
    base = OpenStackSettings(
        cloud_config_file=conf, connection=ConnectionSettings(region="B", username="kept")
    )
    assert resolve(base).connection.region == "A"
    assert resolve(base).connection.username == "kept"
    conf.write_text("[Global]\nregion = C\n")
    assert resolve(base).connection.region == "C"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param('[Global]\nauth-url = "unterminated\n', "unterminated", id="quote"),
        pytest.param("[LoadBalancer]\ncreate-monitor = maybe\n", "true or false", id="bool"),
        pytest.param("[LoadBalancer]\nmax-shared-lb = two\n", "integer", id="int"),
        pytest.param("[LoadBalancer]\nmonitor-delay = soon\n", "duration", id="duration"),
        pytest.param("auth-url = x\n", "cannot parse", id="no-section"),
        pytest.param("[LoadBalancerClass]\nsubnet-id = x\n", "needs a name", id="class-name"),
    ],
)
def test_bad_cloud_conf_names_the_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_cloud_conf(text)


def test_a_key_alone_is_true() -> None:
    assert parse_cloud_conf("[Networking]\nipv6-support-disabled\n") == {
        "networking": {"ipv6_support_disabled": True}
    }


CLUSTER_CONFIGURATION = """
apiVersion: deckhouse.io/v1
kind: OpenStackClusterConfiguration
layout: Standard
standard:
  internalNetworkCIDR: 192.168.199.0/24
  externalNetworkName: public
provider:
  authURL: https://keystone.example.com/v3
  domainName: Default
  tenantID: 0123456789abcdef
  username: deckhouse
  password: s3cret
  region: RegionOne
  caCert: |
    -----BEGIN CERTIFICATE-----
    MIIB
    -----END CERTIFICATE-----
zones: [nova, nova-b]
sshPublicKey: ssh-ed25519 AAAA
tags:
  team: platform
masterNodeGroup:
  replicas: 1
"""


def test_the_cluster_configuration_provider_block(tmp_path: Path) -> None:
    values = parse_cluster_configuration(CLUSTER_CONFIGURATION)
    assert values["zones"] == ["nova", "nova-b"]
    assert values["networking"] == {"public_network_names": ["public"]}
    assert values["tags"] == {"team": "platform"}  # node-group servers' tags (registration)
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER_CONFIGURATION)
    settings = resolve(OpenStackSettings(cluster_configuration_file=path))
    c = settings.connection
    assert (c.auth_url, c.tenant_id, c.username, c.password_value()) == (
        "https://keystone.example.com/v3",
        "0123456789abcdef",
        "deckhouse",
        "s3cret",
    )
    assert c.ca_file is not None and "BEGIN CERTIFICATE" in c.ca_file.read_text()
    with pytest.raises(ConfigError, match="OpenStackClusterConfiguration"):
        parse_cluster_configuration("kind: AWSClusterConfiguration\n")


def test_registration_secret_keys_as_deckhouse(tmp_path: Path) -> None:
    import base64
    import json

    conf = tmp_path / "cloud.conf"
    conf.write_text(CLOUD_CONF)
    secrets = registration_secrets(
        OpenStackSettings(cloud_config_file=conf, zones=["nova"], instances={"sshKeyPairName": "k"})
    )
    assert [s["metadata"]["name"] for s in secrets] == [
        "d8-node-manager-cloud-provider",
        "d8-node-manager-cloud-provider-openstack",
    ]
    data = {k: base64.b64decode(v).decode() for k, v in secrets[0]["data"].items()}
    assert data["type"] == "openstack"
    assert data["instanceClassKind"] == "OpenStackInstanceClass"
    assert data["machineClassKind"] == ""  # Cluster API, as the other clouds
    assert data["instanceClassAPIVersion"] == "v1"
    assert data["region"] == "RegionOne"
    assert {k: data[k] for k in data if k.startswith("capi")} == {
        "capiClusterName": "openstack",
        "capiClusterKind": "OpenStackCluster",
        "capiClusterAPIVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "capiMachineTemplateKind": "OpenStackMachineTemplate",
        "capiMachineTemplateAPIVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
    }
    assert "sshPublicKey" in data
    assert json.loads(data["zones"]) == ["nova"]
    openstack = json.loads(data["openstack"])
    assert openstack["connection"]["tenantName"] == "kube"
    assert openstack["connection"]["domainName"] == "default"
    assert openstack["internalNetworkNames"] == ["kube"]
    assert openstack["externalNetworkNames"] == ["public", "public-2"]
    assert openstack["instances"] == {"sshKeyPairName": "k"}
