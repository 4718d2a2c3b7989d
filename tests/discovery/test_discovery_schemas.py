"""Every cloud's discovery documents against Deckhouse's schemas (``discovery_schemas``): the
layout's ``cloud_discovery_data`` of each example, references resolved, and the discoverer's
document merged from the drivers' ``discovery_data()`` over it (no cloud: stub sessions)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml
from pydantic import ValidationError

from cloudloop.cloud import errors
from cloudloop.cloud.aws import layout as aws_layout
from cloudloop.cloud.aws.base import AwsBase
from cloudloop.cloud.aws.discovery import AwsDiscovery
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.discovery_schemas import DiscoverySchemas, validate
from cloudloop.cloud.dvp import layout as dvp_layout
from cloudloop.cloud.dvp import resources as dvp_resources
from cloudloop.cloud.dvp.base import DvpBase
from cloudloop.cloud.dvp.discovery import DvpDiscovery
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.models import DiscoveryData
from cloudloop.cloud.openstack import layout as openstack_layout
from cloudloop.cloud.openstack.base import OpenStackBase
from cloudloop.cloud.openstack.discovery import OpenStackDiscovery
from cloudloop.cloud.registry import PROVIDERS
from cloudloop.cloud.vsphere import layout as vsphere_layout
from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.datastores import VsphereDatastores
from cloudloop.cloud.vsphere.discovery import ClusterDisks, VsphereDiscovery
from cloudloop.cloud.zvirt import layout as zvirt_layout
from cloudloop.cloud.zvirt.base import ZvirtBase
from cloudloop.cloud.zvirt.discovery import ZvirtDiscovery
from cloudloop.cloud.zvirt.driver import ZvirtDriver
from cloudloop.cloud.zvirt.mapping import StorageDomainView
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.layouts.config import load_documents
from cloudloop.layouts.model import REF, LayoutDef
from cloudloop.rules import discovery as cloud_data


def _schemas(provider: str) -> DiscoverySchemas:
    """The provider record's discovery schemas (every cloud declares them)."""
    schemas = PROVIDERS[provider].discovery_schemas
    assert schemas is not None, provider
    return schemas


EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
UUID = "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"
#: The provider, its layout definitions and the zones the apply found, per example.
EXAMPLE_LAYOUTS: dict[str, tuple[str, Any, list[str]]] = {
    "aws-with-nat": ("aws", aws_layout.define, ["us-east-1a", "us-east-1b"]),
    "aws-without-nat": ("aws", aws_layout.define, ["us-east-1a", "us-east-1b"]),
    "dvp-standard": ("dvp", dvp_layout.define, ["default"]),
    "openstack-standard": ("openstack", openstack_layout.define, ["nova", "nova-b"]),
    "openstack-standard-with-no-router": ("openstack", openstack_layout.define, ["nova"]),
    "openstack-simple": ("openstack", openstack_layout.define, ["nova"]),
    "openstack-simple-with-internal-network": ("openstack", openstack_layout.define, ["nova"]),
    "vsphere-standard": ("vsphere", vsphere_layout.define, ["DC0_C0", "DC0_C1"]),
    "zvirt-standard": ("zvirt", zvirt_layout.define, ["default"]),
}


def build(example: str) -> LayoutDef:
    _, define, zones = EXAMPLE_LAYOUTS[example]
    loaded = load_documents(
        yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()), uuid=UUID
    )
    config = loaded.document
    if example.startswith("openstack"):  # the example leaves the password to the environment
        doc = config.model_dump(mode="json")
        doc["provider"]["password"] = "x"
        config = type(config).model_validate(doc)
    return cast(LayoutDef, define(config, loaded.cluster, zones))


def fake_output(key: str, output: str) -> str:
    """What a step would return: a resource's name, or an ID shaped as its cloud's."""
    kind, _, name = key.partition("/")
    if output == "name":
        return name.rsplit("/", 1)[-1]
    digest = hashlib.sha1(f"{key}.{output}".encode()).hexdigest()[:12]
    if kind == aws_layout.SG:
        return f"sg-{digest}"
    if kind == aws_layout.SUBNET:
        return f"subnet-{digest}"
    return digest


def resolved(value: Any) -> Any:
    if isinstance(value, dict):
        if REF in value:
            return fake_output(str(value[REF]), str(value.get("output", "id")))
        return {k: resolved(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolved(v) for v in value]
    return value


def published(example: str) -> dict[str, Any]:
    """The layout's ``cloud_discovery_data`` as the apply publishes it."""
    document = resolved(build(example).discovery)
    assert isinstance(document, dict)
    return document


@pytest.mark.parametrize("example", sorted(EXAMPLE_LAYOUTS))
def test_the_layouts_cloud_discovery_data_is_valid(example: str) -> None:
    provider = EXAMPLE_LAYOUTS[example][0]
    validate(_schemas(provider).layout, published(example))


# -- the drivers' discovery data, from stub sessions ------------------------------------------
def dvp_data() -> DiscoveryData:
    def storage_class(name: str, **fields: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "provisioner": "x", **fields}

    parent = [
        storage_class("linstor-thin-r1", volumeBindingMode="Immediate", allowVolumeExpansion=True),
        storage_class("ceph-rbd", reclaimPolicy="Retain"),
    ]

    def list_objects(resource: Any, **_: Any) -> list[dict[str, Any]]:
        assert resource is dvp_resources.STORAGE_CLASSES
        return parent

    session = SimpleNamespace(
        namespace="ns",
        settings=SimpleNamespace(zones=[]),
        kube=SimpleNamespace(list=lambda *_, **__: {"items": []}),
        call=lambda _name, fn: fn(),
        list_objects=list_objects,
    )
    return DvpDiscovery(cast(DvpBase, session)).discovery_data()


def zvirt_data() -> DiscoveryData:
    domains = [
        StorageDomainView("data-fast", "active", "ok"),
        StorageDomainView("iso", "inactive", None),
    ]
    session = SimpleNamespace(call=lambda _name, _fn: domains)
    return ZvirtDiscovery(cast(ZvirtBase, session)).discovery_data()


def vsphere_data() -> DiscoveryData:
    class Discovery(VsphereDiscovery):
        def _region_and_zones(self) -> tuple[str, str, list[str]]:  # one inventory read
            return "DC0", "region-a", ["DC0_C0", "DC0_C1"]

    store = SimpleNamespace
    stores = SimpleNamespace(
        datastore_zones=lambda: {"datastore-1": ["DC0_C0"], "datastore-2": ["DC0_C1"]},
        datastores=lambda: [
            store(moref="datastore-1", name="LocalDS_0", type="VMFS", url="ds:///a/"),
            store(moref="datastore-2", name="LocalDS_1", type="VMFS", url="ds:///b/"),
        ],
        storage_policies=lambda: [{"name": "gold", "id": "aa-bb"}],
    )
    settings = SimpleNamespace(
        vm_folder_path="dev/demo", base_resource_pool="", internal_network_names=["k8s"]
    )
    return Discovery(
        cast(VsphereBase, SimpleNamespace(settings=settings)),
        cast(VsphereDatastores, stores),
        cast(ClusterDisks, SimpleNamespace()),
    ).discovery_data()


class OpenStackSession:
    """Answers the requests OpenStack discovery makes (``groups``: ``None`` answers 404)."""

    def __init__(self, groups: list[str] | None = ["default", "ssh"]) -> None:  # noqa: B006
        self.groups = groups
        self.settings = SimpleNamespace(
            connection=SimpleNamespace(region="RegionOne"),
            instances={"imageName": "from-settings", "mainNetwork": "from-settings"},
        )

    def request(self, name: str, service: str, method: str, path: str) -> dict[str, Any]:
        if path == "/os-availability-zone":
            return {
                "availabilityZoneInfo": [
                    {"zoneName": "nova", "zoneState": {"available": True}},
                    {"zoneName": "nova-b", "zoneState": {"available": True}},
                ]
            }
        assert path == "/types", path
        return {
            "volume_types": [
                {"id": "1", "name": "__DEFAULT__", "extra_specs": {}, "is_public": True},
                {"id": "2", "name": "ssd", "extra_specs": {"volume_backend_name": "lvm"}},
            ]
        }

    def list_all(
        self, name: str, service: str, path: str, key: str, params: Any = None
    ) -> list[dict[str, Any]]:
        if path == "/security-groups":
            if self.groups is None:
                raise errors.NotFound("openstack", name, "no such API")
            return [{"name": g} for g in [*self.groups, self.groups[0]]]
        return {
            "/flavors/detail": [{"name": "m1.small"}, {"name": "m1.large"}],
            "/networks": [{"name": "demo-os"}, {"name": "public"}, {"name": ""}],
            "/images": [{"name": "ubuntu-22.04"}, {"name": "ubuntu-22.04"}],
        }[path]


def openstack_data(session: OpenStackSession | None = None) -> DiscoveryData:
    return OpenStackDiscovery(cast(OpenStackBase, session or OpenStackSession())).discovery_data()


def aws_data() -> DiscoveryData:
    zones = [
        {"ZoneName": "us-east-1a", "RegionName": "us-east-1", "State": "available"},
        {"ZoneName": "us-east-1b", "RegionName": "us-east-1", "State": "available"},
    ]
    ec2 = SimpleNamespace(describe_availability_zones=lambda: {"AvailabilityZones": zones})
    session = SimpleNamespace(settings=AwsSettings(region="us-east-1"), client=lambda _: ec2)
    return AwsDiscovery(cast(AwsBase, session)).discovery_data()


DRIVER_DATA = {
    "aws": aws_data,
    "dvp": dvp_data,
    "openstack": openstack_data,
    "vsphere": vsphere_data,
    "zvirt": zvirt_data,
}


def written(example: str) -> dict[str, Any]:
    """The discoverer's document over what the example's apply published."""
    provider = EXAMPLE_LAYOUTS[example][0]
    return cloud_data.discovery_document(published(example), DRIVER_DATA[provider]())


@pytest.mark.parametrize("example", sorted(EXAMPLE_LAYOUTS))
def test_the_discoverers_document_is_valid(example: str) -> None:
    provider = EXAMPLE_LAYOUTS[example][0]
    validate(_schemas(provider).discoverer, written(example))


@pytest.mark.parametrize("provider", ["dvp", "openstack", "vsphere", "zvirt"])
def test_without_terraform_document_too(provider: str) -> None:
    """Hybrid clusters have no ``d8-provider-cluster-configuration``: AWS's closed document
    then lacks its Terraform keys, the others stand alone."""
    document = cloud_data.discovery_document(None, DRIVER_DATA[provider]())
    validate(_schemas(provider).discoverer, document)


def test_a_dvp_document_of_the_earlier_kind_is_rewritten_valid() -> None:
    """An earlier cloudloop wrote ``DVPCloudProviderDiscoveryData`` with ``volumeTypes``, for
    which Deckhouse has no schema: merged over, it takes the current kind and loses the key."""
    earlier = {
        "apiVersion": "deckhouse.io/v1",
        "kind": "DVPCloudProviderDiscoveryData",
        "zones": ["default"],
        "volumeTypes": [{"name": "ceph-rbd", "isEnabled": True, "IsDefault": True}],
    }
    document = cloud_data.discovery_document(earlier, DRIVER_DATA["dvp"]())
    assert document["kind"] == "DVPCloudDiscoveryData" and "volumeTypes" not in document
    validate(_schemas("dvp").discoverer, document)


def test_dvp_storage_classes_come_from_the_valid_document() -> None:
    document = written("dvp-standard")
    assert document["kind"] == "DVPCloudDiscoveryData" and "volumeTypes" not in document
    assert document["storageClasses"] == [
        {
            "name": "ceph-rbd",
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Retain",
            "isEnabled": True,
            "isDefault": True,
        },
        {
            "name": "linstor-thin-r1",
            "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Delete",
            "isEnabled": True,
            "allowVolumeExpansion": True,
        },
    ]
    classes = DvpDriver(DvpSettings()).volumes.storage_classes(document)
    assert [(c.name, c.parameters, c.default) for c in classes] == [
        ("ceph-rbd", {"dvpStorageClass": "ceph-rbd"}, True),
        ("linstor-thin-r1", {"dvpStorageClass": "linstor-thin-r1"}, False),
    ]


def test_zvirt_storage_classes_come_from_the_valid_document() -> None:
    document = written("zvirt-standard")
    assert "zones" not in document
    classes = ZvirtDriver(ZvirtSettings()).volumes.storage_classes(document)
    assert [(c.name, c.default) for c in classes] == [("data-fast", True)]


def test_openstack_discoverer_writes_its_own_kind_from_what_apply_published() -> None:
    document = written("openstack-standard")
    assert document == {
        "apiVersion": "deckhouse.io/v1alpha1",
        "kind": "OpenStackCloudProviderDiscoveryData",
        "flavors": ["m1.large", "m1.small"],
        "additionalNetworks": ["demo-os", "public"],
        "additionalSecurityGroups": ["default", "ssh"],
        "defaultImageName": "ubuntu-22.04",  # the published instances', over the settings'
        "images": ["ubuntu-22.04"],
        "mainNetwork": "demo-os",
        "volumeTypes": [
            {
                "id": "1",
                "name": "__DEFAULT__",
                "description": "",
                "extraSpecs": {},
                "isPublic": True,
                "qosSpecID": "",
            },
            {
                "id": "2",
                "name": "ssd",
                "description": "",
                "extraSpecs": {"volume_backend_name": "lvm"},
                "isPublic": True,
                "qosSpecID": "",
            },
        ],
        "zones": ["nova", "nova-b"],
    }
    without_groups = openstack_data(OpenStackSession(groups=None))
    assert without_groups.extra["additionalSecurityGroups"] == []


# -- what the schemas refuse ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("provider", "document"),
    [
        pytest.param(
            "dvp",
            {
                "apiVersion": "deckhouse.io/v1",
                "kind": "DVPCloudProviderDiscoveryData",
                "zones": ["default"],
            },
            id="dvp-old-kind",
        ),
        pytest.param(
            "dvp",
            {
                "apiVersion": "deckhouse.io/v1",
                "kind": "DVPCloudDiscoveryData",
                "zones": ["default"],
                "volumeTypes": [],
            },
            id="dvp-volume-types",
        ),
        pytest.param(
            "dvp",
            {"apiVersion": "deckhouse.io/v1", "kind": "DVPCloudDiscoveryData", "zones": []},
            id="dvp-no-zone",
        ),
        pytest.param(
            "dvp",
            {"apiVersion": "deckhouse.io/v1", "kind": "DVPCloudDiscoveryData", "zones": ["a", "a"]},
            id="dvp-repeated-zone",
        ),
        pytest.param(
            "zvirt",
            {
                "apiVersion": "deckhouse.io/v1",
                "kind": "ZvirtCloudProviderDiscoveryData",
                "storageDomains": [{"name": "data", "IsDefault": True}],
            },
            id="zvirt-capital-is-default",
        ),
        pytest.param(
            "zvirt",
            {
                "apiVersion": "deckhouse.io/v1",
                "kind": "ZvirtCloudProviderDiscoveryData",
                "zones": ["default"],
            },
            id="zvirt-zones",
        ),
        pytest.param(
            "vsphere",
            {
                "apiVersion": "deckhouse.io/v1",
                "kind": "VsphereCloudDiscoveryData",
                "vmFolderPath": "dev",
                "thumbprint": "AB:CD",
            },
            id="vsphere-thumbprint",
        ),
        pytest.param(
            "aws",
            lambda: {**published("aws-with-nat"), "instanceTypes": []},
            id="aws-instance-types",
        ),
        pytest.param(
            "openstack",
            lambda: {**written("openstack-simple"), "instanceTypes": []},
            id="openstack-instance-types",
        ),
    ],
)
def test_refused(provider: str, document: Any) -> None:
    """(A callable: the document, made when the test runs.)"""
    if callable(document):
        document = document()
    with pytest.raises(ValidationError):
        validate(_schemas(provider).discoverer, document)


def test_openstack_layouts_one_of() -> None:
    standard = published("openstack-standard")
    del standard["loadBalancer"]
    with pytest.raises(ValidationError, match="missing"):
        validate(_schemas("openstack").layout, standard)
    simple = published("openstack-simple")
    simple["instances"]["securityGroups"] = ["demo-os"]
    with pytest.raises(ValidationError, match="not allowed"):
        validate(_schemas("openstack").layout, simple)


def test_every_provider_declares_the_schemas_of_its_documents() -> None:
    missing = sorted(name for name, record in PROVIDERS.items() if record.discovery_schemas is None)
    assert missing == []
