"""vSphere node addresses, instance types and UUID forms without a stack, case by case against
cloud-provider-vsphere's ``nodemanager.go`` (``DiscoverNode``, ``discoverIPs``), ``util.go``
and ``types.go`` (``GuestOSLookup``)."""

from __future__ import annotations

import pytest

from cloudloop.cloud.models import NodeAddress
from cloudloop.cloud.vsphere.config import NodesConfig
from cloudloop.cloud.vsphere.mapping import (
    AddressError,
    GuestNic,
    VmProps,
    instance_type,
    node_addresses,
    provider_id,
    swap_uuid_bytes,
)


def vm(*nics: GuestNic, hostname: str = "node-1") -> VmProps:
    return VmProps(
        moref="vm-1",
        name="node-1",
        uuid="422e4956-ad22-1139-0000-000000000001",
        power_state="poweredOn",
        hostname=hostname,
        nics=nics,
    )


def nic(*ips: str, network: str = "VM Network", device: int = 4000) -> GuestNic:
    return GuestNic(network=network, device_config_id=device, ips=ips)


def pairs(addresses: list[NodeAddress]) -> list[tuple[str, str]]:
    return [(a.type, a.address) for a in addresses if a.type != "Hostname"]


def both(ip: str) -> list[tuple[str, str]]:
    return [("InternalIP", ip), ("ExternalIP", ip)]


NO_RULES = NodesConfig()


@pytest.mark.parametrize(
    ("the_vm", "nodes", "expected"),
    [
        (vm(nic("10.0.0.5", "192.168.1.5")), NO_RULES, both("10.0.0.5")),
        (vm(nic("127.0.0.1", "169.254.1.1", "0.0.0.0", "10.0.0.5")), NO_RULES, both("10.0.0.5")),
        (vm(nic("fe80::1", "::1", "ff02::1", "224.0.0.5", "10.0.0.5")), NO_RULES, both("10.0.0.5")),
        (vm(nic("not-an-ip", "fe80::1%ens192", "10.0.0.5")), NO_RULES, both("10.0.0.5")),
        (vm(nic("10.9.9.9", device=-1), nic("10.0.0.5")), NO_RULES, both("10.0.0.5")),
        (vm(nic("fd00::5", "10.0.0.5")), NO_RULES, both("10.0.0.5")),
        (vm(nic("::ffff:10.0.0.7")), NO_RULES, both("::ffff:10.0.0.7")),
        (
            vm(nic("192.168.1.5", "10.0.0.5", "172.16.0.5")),
            NodesConfig(internal_subnets=("10.0.0.0/8",), external_subnets=("172.16.0.0/12",)),
            [("InternalIP", "10.0.0.5"), ("ExternalIP", "172.16.0.5")],
        ),
        (
            vm(nic("192.168.1.5", "10.0.0.5")),
            NodesConfig(internal_subnets=("10.0.0.0/8", "192.168.0.0/16")),
            [("InternalIP", "10.0.0.5")],
        ),
        (
            vm(nic("192.168.1.5", "10.0.0.5")),
            NodesConfig(internal_subnets=("10.0.0.0/8",)),
            [("InternalIP", "10.0.0.5")],
        ),
        (
            vm(nic("10.0.0.5", network="k8s"), nic("192.0.2.5", network="Public")),
            NodesConfig(internal_network_names=("K8S",), external_network_names=("public",)),
            [("InternalIP", "10.0.0.5"), ("ExternalIP", "192.0.2.5")],
        ),
        (
            vm(nic("10.0.0.5", network="k8s"), nic("10.1.0.5", network="other")),
            NodesConfig(internal_subnets=("10.1.0.0/16",), internal_network_names=("k8s",)),
            [("InternalIP", "10.1.0.5")],
        ),
        (
            vm(nic("10.0.0.5", network="a"), nic("10.1.0.5", network="b")),
            NodesConfig(internal_network_names=("b", "a")),
            [("InternalIP", "10.0.0.5")],
        ),
        (
            vm(nic("10.0.0.5", "10.1.0.5")),
            NodesConfig(exclude_internal_subnets=("10.0.0.0/16",)),
            [("InternalIP", "10.1.0.5"), ("ExternalIP", "10.0.0.5")],
        ),
        (
            vm(nic("10.0.0.5", "10.1.0.5")),
            NodesConfig(
                internal_subnets=("10.0.0.0/8",), exclude_internal_subnets=("10.0.0.0/16",)
            ),
            [("InternalIP", "10.1.0.5")],
        ),
        (
            vm(nic("10.0.0.5")),
            NodesConfig(exclude_internal_subnets=("10.0.0.0/8",)),
            [("ExternalIP", "10.0.0.5")],
        ),
        (
            vm(nic("10.0.0.5", network="k8s")),
            NodesConfig(internal_network_names=("k8s",), external_network_names=("public",)),
            [("InternalIP", "10.0.0.5")],
        ),
        (
            vm(nic("192.168.1.5", "10.0.0.5")),
            NodesConfig(internal_subnets=("172.16.0.0/12",)),
            both("192.168.1.5"),
        ),
    ],
    ids=[
        "first-ip-both-kinds",
        "local-only-v4-dropped",
        "local-only-v6-and-link-local-multicast-dropped",
        "unparsable-and-zoned-dropped",
        "non-vnic-dropped",
        "ipv4-family-only",
        "ipv4-mapped-counts-as-ipv4",
        "subnets-internal-and-external",
        "subnet-order-wins-over-ip-order",
        "internal-subnet-only",
        "network-names-case-insensitive",
        "subnet-beats-network-name",
        "first-ip-on-any-listed-network",
        "exclusions-apart-for-the-default",
        "excluded-subnet-match-skipped",
        "all-excluded-from-internal",
        "one-network-present",
        "no-subnet-match-falls-back",
    ],
)
def test_ipv4_address_selection(
    the_vm: VmProps, nodes: NodesConfig, expected: list[tuple[str, str]]
) -> None:
    addresses = node_addresses(the_vm, nodes)
    assert addresses[0] == NodeAddress(type="Hostname", address="node-1")
    assert pairs(addresses) == expected


@pytest.mark.parametrize(
    ("ips", "families", "nodes", "expected"),
    [
        (("10.0.0.5", "fd00::5"), ("ipv6",), NO_RULES, both("fd00::5")),
        (
            ("10.0.0.5", "fd00::5"),
            ("ipv4", "ipv6"),
            NO_RULES,
            [*both("10.0.0.5"), *both("fd00::5")],
        ),
        (
            ("fd00:0:0:0:0:0:0:5", "2001:db8::5"),
            ("ipv6",),
            NodesConfig(external_subnets=("2001:db8::/32",)),
            [("ExternalIP", "2001:db8::5")],
        ),
        (("fd00:0:0:0:0:0:0:5",), ("ipv6",), NO_RULES, both("fd00:0:0:0:0:0:0:5")),
    ],
    ids=["ipv6-only", "dual-stack-in-order", "ipv6-external-subnet", "reported-form-kept"],
)
def test_ip_families(
    ips: tuple[str, ...],
    families: tuple[str, ...],
    nodes: NodesConfig,
    expected: list[tuple[str, str]],
) -> None:
    assert pairs(node_addresses(vm(nic(*ips)), nodes, families)) == expected


@pytest.mark.parametrize(
    ("the_vm", "nodes", "families", "match"),
    [
        (vm(nic("10.0.0.5"), hostname=""), NO_RULES, ("ipv4",), "host name"),
        (vm(), NO_RULES, ("ipv4",), "no guest NICs"),
        (vm(nic()), NO_RULES, ("ipv4",), "no guest IP"),
        (vm(nic("127.0.0.1", "fe80::1")), NO_RULES, ("ipv4",), "no guest IP"),
        (vm(nic("10.0.0.5", device=-1)), NO_RULES, ("ipv4",), "no guest IP"),
        (vm(nic("10.0.0.5")), NO_RULES, ("ipv6",), "no suitable ipv6"),
        (vm(nic("10.0.0.5")), NO_RULES, ("ipv4", "ipv6"), "no suitable ipv6"),
        (
            vm(nic("10.0.0.5", network="VM Network")),
            NodesConfig(internal_network_names=("k8s",), external_network_names=("public",)),
            ("ipv4",),
            "neither the internal nor the external",
        ),
        (
            vm(nic("10.0.0.5")),
            NodesConfig(
                exclude_internal_subnets=("10.0.0.0/8",), exclude_external_subnets=("10.0.0.0/8",)
            ),
            ("ipv4",),
            "no suitable ipv4",
        ),
    ],
    ids=[
        "no-hostname",
        "no-nics",
        "nic-without-ips",
        "only-local-ips",
        "only-non-vnic",
        "family-missing",
        "second-family-missing",
        "on-neither-network",
        "all-excluded",
    ],
)
def test_undiscoverable(
    the_vm: VmProps, nodes: NodesConfig, families: tuple[str, ...], match: str
) -> None:
    with pytest.raises(AddressError, match=match):
        node_addresses(the_vm, nodes, families)


@pytest.mark.parametrize(
    ("cpu", "memory_mb", "guest_id", "expected"),
    [
        (1, 32, "otherGuest", "vsphere-vm.cpu-1.mem-0gb.os-other"),
        (2, 4096, "ubuntu64Guest", "vsphere-vm.cpu-2.mem-4gb.os-ubuntu"),
        (4, 2047, "rhel9_64Guest", "vsphere-vm.cpu-4.mem-1gb.os-rhel9"),
        (1, 1024, "rhel10_64Guest", "vsphere-vm.cpu-1.mem-1gb.os-rhel10"),
        (1, 1024, "otherLinux64Guest", "vsphere-vm.cpu-1.mem-1gb.os-linux"),
        (1, 1024, "centos64Guest", "vsphere-vm.cpu-1.mem-1gb.os-centos64"),
        (1, 1024, "centos7_64Guest", "vsphere-vm.cpu-1.mem-1gb.os-centos7"),
        (1, 1024, "sles64Guest", "vsphere-vm.cpu-1.mem-1gb.os-sles64"),
        (1, 1024, "oracleLinux7_64Guest", "vsphere-vm.cpu-1.mem-1gb.os-oracleLinux7"),
        (1, 1024, "windows9Server64Guest", "vsphere-vm.cpu-1.mem-1gb.os-win10server"),
        (1, 1024, "windows9_64Guest", "vsphere-vm.cpu-1.mem-1gb.os-win10"),
        (1, 1024, "darwin16_64Guest", "vsphere-vm.cpu-1.mem-1gb.os-darwin"),
        (1, 1024, "vmwarePhoton64Guest", "vsphere-vm.cpu-1.mem-1gb.os-photon"),
        (1, 1024, "debian10_64Guest", "vsphere-vm.cpu-1.mem-1gb.os-debian10"),
        (1, 1024, "debian11_64Guest", "vsphere-vm.cpu-1.mem-1gb.os-unknown"),
        (1, 1024, "other4xLinux64Guest", "vsphere-vm.cpu-1.mem-1gb.os-unknown"),
        (1, 1024, "", "vsphere-vm.cpu-1.mem-1gb.os-unknown"),
    ],
    ids=[
        "vcsim-default",
        "ubuntu",
        "memory-rounds-down",
        "rhel10",
        "other-linux",
        "centos64-quirk",
        "centos7",
        "sles64-quirk",
        "oracle-mixed-case",
        "windows-server-2016",
        "windows-10",
        "darwin",
        "photon",
        "debian10",
        "debian11-not-in-table",
        "other4x-not-in-table",
        "empty",
    ],
)
def test_instance_type(cpu: int, memory_mb: int, guest_id: str, expected: str) -> None:
    assert instance_type(cpu, memory_mb, guest_id) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            "56492e42-22ad-3911-6d72-59cc8f11bc11",
            "422e4956-ad22-1139-6d72-59cc8f11bc11",
        ),
        (
            "422E4956-AD22-1139-6D72-59CC8F11BC11",
            "56492e42-22ad-3911-6d72-59cc8f11bc11",
        ),
        ("not-a-uuid", "not-a-uuid"),
    ],
    ids=["kubelet-to-vsphere", "upper-case-back", "malformed-kept"],
)
def test_uuid_byte_order(given: str, expected: str) -> None:
    assert swap_uuid_bytes(given) == expected
    if expected != given:
        assert swap_uuid_bytes(swap_uuid_bytes(given)) == given.lower()


def test_provider_id_is_lower_case() -> None:
    assert provider_id("422E4956-AD22-1139-6D72-59CC8F11BC11") == (
        "vsphere://422e4956-ad22-1139-6d72-59cc8f11bc11"
    )
