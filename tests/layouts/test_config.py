"""The five ``<Provider>ClusterConfiguration`` documents: good ones parse with upstream's
defaults, bad ones are refused with every error at once (path + message), secrets never print."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudloop.layouts.config import (
    AWSClusterConfiguration,
    InvalidConfig,
    load_documents,
    public_document,
    validate_document,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
UUID = "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHf0sKGoGm2JrFGhTiFqcXcxp8HT1i6kQk2bIsOfpBTX x@y"


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def provider_doc(path: Path) -> dict[str, Any]:
    [doc] = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] != "ClusterConfiguration"]
    assert isinstance(doc, dict)
    return doc


def example(name: str) -> dict[str, Any]:
    return provider_doc(EXAMPLES / f"{name}.yaml")


def errors_of(doc: Any) -> dict[str, str]:
    with pytest.raises(InvalidConfig) as caught:
        validate_document(doc)
    return {e.path: e.message for e in caught.value.errors}


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in examples()])
def test_every_example_loads(path: Path) -> None:
    loaded = load_documents(yaml.safe_load_all(path.read_text()), uuid=UUID)
    assert loaded.cluster.uuid == UUID and loaded.cluster.prefix
    assert "<" not in str(public_document(loaded.document))  # the secrets' placeholders are gone


def test_the_examples_cover_every_document_kind() -> None:
    kinds = {provider_doc(p)["kind"] for p in examples()}
    assert kinds == {
        "AWSClusterConfiguration",
        "OpenStackClusterConfiguration",
        "VsphereClusterConfiguration",
        "ZvirtClusterConfiguration",
        "DVPClusterConfiguration",
    }


def test_aws_defaults_are_upstreams() -> None:
    doc = example("aws-without-nat")
    del doc["sshAllowList"]
    del doc["masterNodeGroup"]["instanceClass"]["etcdDisk"]
    config = validate_document(doc)
    assert isinstance(config, AWSClusterConfiguration)
    assert config.sshAllowList == ["0.0.0.0/0"]
    assert config.publicNetworkAllowList == ["0.0.0.0/0"]
    assert config.masterNodeGroup.instanceClass.etcdDisk.sizeGb == 20
    assert config.masterNodeGroup.instanceClass.etcdDisk.type == "gp3"
    assert config.disableDefaultSecurityGroup is False


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value


_DELETE = object()

BAD: list[tuple[str, dict[str, Any], set[str]]] = [
    # (example, {path: value}, expected error paths)
    ("aws-without-nat", {"layout": "Simple"}, {"layout"}),
    (
        "aws-without-nat",
        {"provider.providerSecretAccessKey": _DELETE},
        {"provider.providerSecretAccessKey"},
    ),
    ("aws-without-nat", {"existingVPCID": "vpc-1"}, {"vpcNetworkCIDR"}),
    ("aws-without-nat", {"vpcNetworkCIDR": _DELETE}, {"vpcNetworkCIDR"}),
    ("aws-without-nat", {"vpcNetworkCIDR": "10.0.0.300/16"}, {"vpcNetworkCIDR"}),
    ("aws-without-nat", {"nodeNetworkCIDR": "192.168.0.0/24"}, {"nodeNetworkCIDR"}),
    ("aws-without-nat", {"masterNodeGroup.replicas": 0}, {"masterNodeGroup.replicas"}),
    (
        "aws-without-nat",
        {"masterNodeGroup.instanceClass.diskType": "gp9"},
        {"masterNodeGroup.instanceClass.diskType"},
    ),
    (
        "aws-without-nat",
        {"masterNodeGroup.instanceClass.ami": _DELETE},
        {"masterNodeGroup.instanceClass.ami"},
    ),
    ("aws-without-nat", {"unknownField": 1}, {"unknownField"}),
    (
        "aws-without-nat",
        {"additionalRolePolicies": ["not a policy"]},
        {"additionalRolePolicies[0]"},
    ),
    ("aws-without-nat", {"sshPublicKey": "hello"}, {"sshPublicKey"}),
    ("aws-without-nat", {"nodeGroups.0.name": "Front_1"}, {"nodeGroups[0].name"}),
    (
        "aws-with-nat",
        {"withNAT.bastionInstance.zone": "eu-west-1a"},
        {"withNAT.bastionInstance.zone"},
    ),
    (
        "aws-with-nat",
        {"withNAT.bastionInstance.instanceClass.instanceType": _DELETE},
        {"withNAT.bastionInstance.instanceClass.instanceType"},
    ),
    ("openstack-standard", {"standard": _DELETE}, {"standard"}),
    ("openstack-standard", {"provider.tenantID": "abc"}, {"provider.tenantName"}),
    (
        "openstack-standard",
        {"masterNodeGroup.volumeTypeMap": {}},
        {"masterNodeGroup.volumeTypeMap"},
    ),
    (
        "openstack-standard",
        {"masterNodeGroup.serverGroup": {"policy": "ManuallyManaged"}},
        {"masterNodeGroup.serverGroup.manuallyManaged.id"},
    ),
    (
        "openstack-standard",
        {"standard.internalNetworkDNSServers": ["dns"]},
        {"standard.internalNetworkDNSServers[0]"},
    ),
    ("vsphere-standard", {"vmFolderPath": _DELETE, "layout": "Other"}, {"vmFolderPath", "layout"}),
    (
        "vsphere-standard",
        {"masterNodeGroup.instanceClass.numCPUs": 0},
        {"masterNodeGroup.instanceClass.numCPUs"},
    ),
    ("zvirt-standard", {"clusterID": "not-a-uuid"}, {"clusterID"}),
    (
        "zvirt-standard",
        {"masterNodeGroup.instanceClass.storageDomainID": _DELETE},
        {"masterNodeGroup.instanceClass.storageDomainID"},
    ),
    ("dvp-standard", {"provider.networkPolicy": "Open"}, {"provider.networkPolicy"}),
    (
        "dvp-standard",
        {"masterNodeGroup.instanceClass.rootDisk.image.kind": "Image"},
        {"masterNodeGroup.instanceClass.rootDisk.image.kind"},
    ),
    (
        "dvp-standard",
        {"masterNodeGroup.instanceClass.virtualMachine.ipAddresses": ["10.0.0.1", "x"]},
        {
            "masterNodeGroup.instanceClass.virtualMachine.ipAddresses",
            "masterNodeGroup.instanceClass.virtualMachine.ipAddresses[1]",
        },
    ),
]


@pytest.mark.parametrize(
    ("name", "changes", "paths"),
    [pytest.param(n, c, p, id=f"{n}:{','.join(c)}") for n, c, p in BAD],
)
def test_a_bad_document_is_refused_with_its_errors(
    name: str, changes: dict[str, Any], paths: set[str]
) -> None:
    doc = copy.deepcopy(example(name))
    for path, value in changes.items():
        _set(doc, path, value)
    assert set(errors_of(doc)) == paths


def test_every_error_is_reported_at_once() -> None:
    doc = example("aws-without-nat")
    doc["layout"] = "Nope"
    doc["masterNodeGroup"]["replicas"] = -1
    doc["existingVPCID"] = "vpc-1"
    del doc["sshPublicKey"]
    errors = errors_of(doc)
    assert set(errors) == {"layout", "masterNodeGroup.replicas", "vpcNetworkCIDR", "sshPublicKey"}
    assert errors["sshPublicKey"] == "required"


def test_unknown_kind_and_missing_identity_are_refused_together() -> None:
    docs = [
        {"kind": "ClusterConfiguration", "cloud": {"prefix": "Bad_Prefix"}},
        example("aws-with-nat"),
    ]
    with pytest.raises(InvalidConfig) as caught:
        load_documents(docs)
    assert {e.path for e in caught.value.errors} == {"cloud.prefix", "clusterUUID"}
    with pytest.raises(InvalidConfig) as caught:
        load_documents([{"kind": "Other"}], uuid=UUID, prefix="p")
    assert len(caught.value.errors) == 2  # the unexpected kind, and no provider document


def test_flags_win_over_the_cluster_configuration() -> None:
    docs = [{"kind": "ClusterConfiguration", "cloud": {"prefix": "a"}}, example("aws-with-nat")]
    loaded = load_documents(docs, prefix="b", uuid=UUID, pod_subnet_cidr="10.9.0.0/16")
    assert (loaded.cluster.prefix, loaded.cluster.pod_subnet_cidr) == ("b", "10.9.0.0/16")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in examples()])
def test_secrets_never_print(path: Path) -> None:
    doc = provider_doc(path)
    secret = "s3cr3t-value-" + path.stem
    provider = doc["provider"]
    for field in ("providerSecretAccessKey", "password", "kubeconfigDataBase64"):
        if field in provider:
            provider[field] = secret
    config = validate_document(doc)
    assert secret not in repr(config) and secret not in str(config)
    assert secret not in str(public_document(config))
    doc["masterNodeGroup"]["replicas"] = "many"
    with pytest.raises(InvalidConfig) as caught:
        validate_document(doc)
    assert secret not in str(caught.value)
