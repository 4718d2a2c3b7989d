"""The DVP driver's pure parts: spec validation, the objects it writes, error translation,
providerIDs, instances, discovery data and the registration Secret."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import urllib3

from cloudloop.cloud import errors
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import translate
from cloudloop.cloud.dvp.discovery import storage_classes
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.dvp.instances import vm_instance
from cloudloop.cloud.dvp.machines import owner_reference, vm_addresses
from cloudloop.cloud.dvp.registration import registration_secrets, registration_values
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.dvp.spec import parse_spec
from cloudloop.cloud.models import InstanceState, MachineSpec
from cloudloop.kube.api import KubeError
from devstack.machine_fixtures import dvp_machine_spec

SETTINGS = DvpSettings(
    namespace="project", cluster_uuid="uuid-1", additional_vm_labels={"team": "infra"}
)


def machine_spec(**overrides: Any) -> MachineSpec:
    return MachineSpec(
        name="m1",
        namespace="d8-cloud-instance-manager",
        cluster="c1",
        machine_uid="uid-1",
        provider_spec=dvp_machine_spec(**overrides),
    )


@pytest.mark.parametrize(
    ("override", "field"),
    [
        pytest.param({"vmClassName": ""}, "spec.vmClassName", id="empty-class"),
        pytest.param({"cpu": {"cores": 0}}, "spec.cpu.cores", id="zero-cores"),
        pytest.param({"cpu": {"cores": 1, "cpuFraction": "0%"}}, "cpuFraction", id="fraction"),
        pytest.param({"memory": "8 GB"}, "spec.memory", id="memory-not-quantity"),
        pytest.param({"rootDiskSize": "-1Gi"}, "spec.rootDiskSize", id="negative-disk"),
        pytest.param({"rootDiskStorageClass": None}, "rootDiskStorageClass", id="no-class"),
        pytest.param({"bootloader": "UEFI"}, "spec.bootloader", id="bootloader"),
        # not a policy of the virtualization API: the VM would be refused by the parent
        pytest.param({"liveMigrationPolicy": "Never"}, "liveMigrationPolicy", id="migration"),
        pytest.param(
            {"bootDiskImageRef": {"kind": "DataVolume", "name": "x"}},
            "bootDiskImageRef.kind",
            id="image-kind",
        ),
        pytest.param(
            {"additionalDisks": [{"size": "1Gi"}]}, "additionalDisks[0].storageClass", id="disk"
        ),
    ],
)
def test_invalid_specs_are_invalid_requests(override: dict[str, Any], field: str) -> None:
    spec = dvp_machine_spec(**override)
    spec = {k: v for k, v in spec.items() if v is not None}
    with pytest.raises(errors.InvalidRequest) as err:
        parse_spec(spec)
    assert field in str(err.value)
    assert not err.value.retryable


def test_defaults_as_the_crd() -> None:
    spec = parse_spec(
        {
            "vmClassName": "generic",
            "cpu": {},
            "rootDiskSize": 21474836480,
            "rootDiskStorageClass": "sc",
            "bootDiskImageRef": {"name": "img"},
        }
    )
    assert (spec.cpu.cores, spec.cpu.cpu_fraction) == (4, "100%")
    assert spec.memory == "8Gi"
    assert spec.root_disk_size == "21474836480"
    assert spec.boot_disk_image_ref.kind == "VirtualImage"
    assert spec.bootloader == "EFI"


@pytest.mark.parametrize(
    ("control_plane", "migration"),
    [pytest.param(False, "PreferSafe", id="worker"), pytest.param(True, "PreferForced", id="cp")],
)
def test_vm_body_as_capdvp_makes_it(control_plane: bool, migration: str) -> None:
    driver = DvpDriver(SETTINGS)
    spec = machine_spec(additionalDisks=[{"size": "5Gi", "storageClass": "fast"}])
    spec.control_plane = control_plane
    body = driver.machines._vm_body(spec, parse_spec(spec.provider_spec))
    assert body["metadata"]["labels"] == {
        "team": "infra",
        r.MANAGED_BY_LABEL: "deckhouse",
        r.CLUSTER_UUID_LABEL: "uuid-1",
        r.HOSTNAME_LABEL: "m1",
        r.MACHINE_UID_LABEL: "uid-1",
    }
    assert body["metadata"]["namespace"] == "project"
    vm = body["spec"]
    assert vm["liveMigrationPolicy"] == migration
    assert vm["runPolicy"] == "AlwaysOnUnlessStoppedManually"
    assert vm["blockDeviceRefs"] == [
        {"kind": "VirtualDisk", "name": "m1-boot"},
        {"kind": "VirtualDisk", "name": "m1-additional-disk-0"},
    ]
    assert vm["provisioning"]["userDataRef"] == {"kind": "Secret", "name": "cloud-init-m1"}


def test_disks_and_secret_are_owned_by_the_vm() -> None:
    driver = DvpDriver(SETTINGS)
    spec = machine_spec(additionalDisks=[{"size": "5Gi", "storageClass": "fast"}])
    owner = owner_reference({"metadata": {"name": "m1", "uid": "vm-uid"}})
    boot, extra = driver.machines._disk_bodies(spec, parse_spec(spec.provider_spec), owner)
    assert boot["metadata"]["name"] == "m1-boot"
    assert boot["spec"]["dataSource"]["objectRef"] == {
        "kind": "ClusterVirtualImage",
        "name": "ubuntu-24-04",
    }
    assert extra["metadata"]["name"] == "m1-additional-disk-0"
    assert "dataSource" not in extra["spec"]
    assert extra["spec"]["persistentVolumeClaim"] == {"storageClassName": "fast", "size": "5Gi"}
    assert boot["metadata"]["ownerReferences"] == [owner]
    assert extra["metadata"]["labels"][r.DISK_NAME_LABEL] == "m1-additional-disk-0"
    secret = driver.machines._secret_body(spec, b"#cloud-config", owner)
    assert secret["type"] == "provisioning.virtualization.deckhouse.io/cloud-init"
    assert base64.b64decode(secret["data"]["userData"]) == b"#cloud-config"
    assert secret["metadata"]["ownerReferences"] == [owner]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        pytest.param(KubeError(401, "Unauthorized", None), errors.CloudAuthFailed, id="401"),
        pytest.param(KubeError(403, "Forbidden", None), errors.CloudAuthFailed, id="403"),
        pytest.param(KubeError(404, "NotFound", None), errors.NotFound, id="404"),
        pytest.param(
            KubeError(409, "Conflict", {"reason": "AlreadyExists"}),
            errors.AlreadyExists,
            id="exists",
        ),
        pytest.param(KubeError(409, "Conflict", None), errors.CloudError, id="conflict"),
        pytest.param(KubeError(422, "Invalid", None), errors.InvalidRequest, id="422"),
        pytest.param(KubeError(429, "TooManyRequests", None), errors.CloudThrottled, id="429"),
        pytest.param(KubeError(503, "Unavailable", None), errors.CloudError, id="503"),
        pytest.param(KubeError(0, "Unreachable", None), errors.CloudUnreachable, id="no-answer"),
        pytest.param(
            urllib3.exceptions.MaxRetryError(None, "/", "refused"),  # type: ignore[arg-type]
            errors.CloudUnreachable,
            id="refused",
        ),
    ],
)
def test_parent_errors_are_classified(error: Exception, kind: type[errors.CloudError]) -> None:
    translated = translate("GetVirtualMachine", error)
    assert type(translated) is kind
    assert translated.provider == "dvp"


def test_server_errors_are_never_not_found() -> None:
    for status in (500, 502, 503, 504):
        assert not isinstance(translate("Get", KubeError(status, "x", None)), errors.NotFound)


@pytest.mark.parametrize(
    ("provider_id", "name"),
    [
        pytest.param("dvp://m1", "m1", id="scheme"),
        pytest.param("dvp:///m1", "m1", id="triple-slash"),
        pytest.param("aws:///eu-1a/i-1", None, id="aws"),
        pytest.param("dvp://", None, id="empty"),
        pytest.param("dvp://a/b", None, id="path"),
    ],
)
def test_provider_ids(provider_id: str, name: str | None) -> None:
    driver = DvpDriver(SETTINGS)
    if name is None:
        with pytest.raises(errors.InvalidRequest):
            driver.instances.instance_id_from_provider_id(provider_id)
    else:
        assert driver.instances.instance_id_from_provider_id(provider_id) == name


@pytest.mark.parametrize(
    ("phase", "state"),
    [
        pytest.param("Running", InstanceState.RUNNING, id="running"),
        pytest.param("Migrating", InstanceState.RUNNING, id="migrating"),
        pytest.param("Stopped", InstanceState.STOPPED, id="stopped"),
        pytest.param("Starting", InstanceState.PENDING, id="starting"),
        pytest.param("Degraded", InstanceState.UNKNOWN, id="degraded"),
    ],
)
def test_vm_instances(phase: str, state: InstanceState) -> None:
    vm = {
        "metadata": {"name": "m1", "labels": {r.HOSTNAME_LABEL: "node-1"}},
        "status": {"phase": phase, "ipAddress": "10.66.0.7"},
    }
    instance = vm_instance(vm)
    assert instance.state is state
    assert instance.provider_id == "dvp://m1"
    assert instance.private_dns_name == "node-1"
    assert [(a.type, a.address) for a in instance.addresses] == [
        ("ExternalIP", "10.66.0.7"),
        ("InternalIP", "10.66.0.7"),
        ("Hostname", "node-1"),
    ]
    assert instance.shut_down is (phase == "Stopped")
    assert not instance.gone


def test_machine_addresses_without_ip_name_the_vm_only() -> None:
    assert [a.type for a in vm_addresses({"metadata": {"name": "m1"}})] == [
        "Hostname",
        "InternalDNS",
    ]


def test_storage_classes_sorted_first_is_default_with_upstreams_defaults() -> None:
    def sc(name: str, **fields: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, **fields}

    parent = [
        sc("b", volumeBindingMode="Immediate", reclaimPolicy="Retain", allowVolumeExpansion=True),
        sc("a"),
        sc("c", allowVolumeExpansion=False),
    ]
    assert storage_classes(parent) == [
        {
            "name": "a",
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
            "isEnabled": True,
            "isDefault": True,
        },
        {
            "name": "b",
            "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Retain",
            "isEnabled": True,
            "allowVolumeExpansion": True,
        },
        {
            "name": "c",
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
            "isEnabled": True,
        },
    ]
    assert storage_classes([]) == []


def test_registration_values_as_deckhouse_renders_them() -> None:
    values = {k: base64.b64decode(v).decode() for k, v in registration_values(SETTINGS).items()}
    assert values == {
        "type": "dvp",
        "region": "default",
        "zones": '["default"]',
        "instanceClassAPIVersion": "v1alpha1",
        "instanceClassKind": "DVPInstanceClass",
        "machineClassKind": "",
        "capiClusterKind": "DeckhouseCluster",
        "capiClusterAPIVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "capiClusterAPIGroup": "infrastructure.cluster.x-k8s.io",
        "capiClusterName": "dvp",
        "capiMachineTemplateKind": "DeckhouseMachineTemplate",
        "capiMachineTemplateAPIVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "capiMachineTemplateAPIGroup": "infrastructure.cluster.x-k8s.io",
        "dvp": json.dumps({"additionalVMLabels": {"team": "infra"}}, separators=(",", ":")),
    }
    names = [s["metadata"]["name"] for s in registration_secrets(SETTINGS)]
    assert names == ["d8-node-manager-cloud-provider", "d8-node-manager-cloud-provider-dvp"]


def test_no_parent_configured_is_an_auth_failure_not_the_local_cluster() -> None:
    driver = DvpDriver(DvpSettings(namespace="project", kubeconfig=None, kubeconfig_base64=None))
    with pytest.raises(errors.CloudAuthFailed):
        driver.machines.get_machine(machine_spec())


def test_base64_kubeconfig_is_read(tmp_path: Any) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "p", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "s3cr3t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "p", "user": "u"}}],
        "current-context": "c",
    }
    encoded = base64.b64encode(json.dumps(kubeconfig).encode()).decode()
    driver = DvpDriver(DvpSettings.model_validate({"namespace": "p", "kubeconfig_base64": encoded}))
    assert driver.session.kube.api.configuration.host == "https://127.0.0.1:1"
    assert "s3cr3t" not in repr(driver.settings)
