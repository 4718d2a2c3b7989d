"""The five upstream ``<Provider>ClusterConfiguration`` documents, validated as their OpenAPI
schemas do, plus the cluster's identity (prefix, UUID, pod subnet).

Field names and defaults are upstream's (camelCase), so a model dumps back into the upstream
shape. Why one pass, why no values, and the departures:
docs/decisions/0058-cluster-configuration-validated-as-upstream.md.

Rules:
- A document is checked in one pass: field errors and upstream's cross-field rules are collected
  together, so a bad document is refused with *every* error at once (:class:`InvalidConfig`:
  path + message), before any cloud call. A section of the wrong shape is its field's error only.
- A message names the field and what is wrong, never the value (:mod:`cloudloop.errortext`).
- Credentials are :class:`~pydantic.SecretStr`; :func:`public_document` drops them, so nothing
  secret reaches a workflow input or history.
- A missing cluster UUID is an error, never a generated one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
)

from cloudloop.errortext import field_problems

API_VERSION = "deckhouse.io/v1"
API_VERSIONS = ("deckhouse.io/v1", "deckhouse.io/v1alpha1")
#: ``ClusterConfiguration.cloud.prefix`` (upstream pattern).
PREFIX_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DEFAULT_POD_SUBNET = "10.111.0.0/16"
_SSH_KEY_TYPES = ("ssh-rsa", "ssh-ed25519", "ssh-dss", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-")


class ConfigError(BaseModel):
    """One problem of a document: where (``masterNodeGroup.replicas``) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<document>'}: {self.message}"


class InvalidConfig(ValueError):
    """A document refused, with every error found."""

    def __init__(self, errors: list[ConfigError], source: str = "") -> None:
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(f"{head}{len(errors)} error(s):\n" + "\n".join(f"  {e}" for e in errors))


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError("not a CIDR") from None
    if network.version != 4 or "/" not in value:
        raise ValueError("not an IPv4 CIDR (a.b.c.d/n)")
    return value


def _ipv4(value: str) -> str:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError("not an IPv4 address") from None
    return value


Cidr = Annotated[str, AfterValidator(_cidr)]
IPv4 = Annotated[str, AfterValidator(_ipv4)]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]
Zones = Annotated[list[NonEmpty], Field(min_length=1)]
Tags = dict[str, str]


class _Open(BaseModel):
    """A nested object upstream leaves open (unknown fields are kept, not refused)."""

    model_config = ConfigDict(extra="allow", hide_input_in_errors=True)


class _Closed(BaseModel):
    """An object with ``additionalProperties: false`` upstream."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


class NodeTemplate(_Open):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, Any]] = Field(default_factory=list)


# -- AWS ------------------------------------------------------------------------------------
AwsDiskType = Literal["gp3", "gp2", "io2", "io1", "st1", "sc1"]


class AwsInstanceClass(_Open):
    instanceType: NonEmpty
    ami: NonEmpty
    additionalSecurityGroups: list[str] = Field(default_factory=list)
    diskType: AwsDiskType | None = None
    diskSizeGb: Annotated[int, Field(ge=1)] | None = None


class AwsEtcdDisk(_Open):
    sizeGb: Annotated[int, Field(ge=1)] = 20
    type: AwsDiskType = "gp3"


class AwsMasterInstanceClass(AwsInstanceClass):
    etcdDisk: AwsEtcdDisk = Field(default_factory=AwsEtcdDisk)


class AwsMasterNodeGroup(_Open):
    replicas: Annotated[int, Field(ge=1)]
    instanceClass: AwsMasterInstanceClass
    zones: Zones | None = None
    additionalTags: Tags = Field(default_factory=dict)


class AwsNodeGroup(_Open):
    name: NonEmpty
    replicas: Annotated[int, Field(ge=0)]
    instanceClass: AwsInstanceClass
    zones: Zones | None = None
    additionalTags: Tags = Field(default_factory=dict)
    nodeTemplate: NodeTemplate | None = None


class AwsProvider(_Closed):
    providerAccessKeyId: SecretStr
    providerSecretAccessKey: SecretStr
    region: NonEmpty


class AwsBastion(_Open):
    zone: str | None = None
    instanceClass: AwsInstanceClass


class AwsWithNAT(_Closed):
    bastionInstance: AwsBastion | None = None


class AwsEmpty(_Closed):
    pass


RolePolicy = Annotated[str, StringConstraints(pattern=r"^([a-zA-Z0-9_\-]+):([a-zA-Z0-9_\-\*\?]+)$")]


class AWSClusterConfiguration(_Closed):
    apiVersion: Literal["deckhouse.io/v1", "deckhouse.io/v1alpha1"]
    kind: Literal["AWSClusterConfiguration"]
    layout: Literal["WithoutNAT", "WithNAT", "Standard"]
    provider: AwsProvider
    masterNodeGroup: AwsMasterNodeGroup
    nodeGroups: list[AwsNodeGroup] = Field(default_factory=list)
    sshPublicKey: NonEmpty
    vpcNetworkCIDR: Cidr | None = None
    existingVPCID: NonEmpty | None = None
    nodeNetworkCIDR: Cidr | None = None
    sshAllowList: list[Cidr] = Field(default_factory=lambda: ["0.0.0.0/0"])
    publicNetworkAllowList: list[Cidr] = Field(default_factory=lambda: ["0.0.0.0/0"])
    disableDefaultSecurityGroup: bool = False
    tags: Tags = Field(default_factory=dict)
    zones: Zones | None = None
    peeredVPCs: list[str] = Field(default_factory=list)
    additionalRolePolicies: Annotated[list[RolePolicy], Field(min_length=1)] | None = None
    iamNodeRole: (
        Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9+=,.@\-_']{1,64}$")] | None
    ) = None
    standard: AwsEmpty | None = None
    withoutNAT: AwsEmpty | None = None
    withNAT: AwsWithNAT | None = None


def _aws_rules(doc: Mapping[str, Any]) -> Iterable[ConfigError]:
    has_cidr, has_vpc = doc.get("vpcNetworkCIDR") is not None, doc.get("existingVPCID") is not None
    if has_cidr == has_vpc:
        yield ConfigError(
            path="vpcNetworkCIDR",
            message="exactly one of vpcNetworkCIDR and existingVPCID must be set"
            + (" (both are)" if has_cidr else " (neither is)"),
        )
    vpc, node = doc.get("vpcNetworkCIDR"), doc.get("nodeNetworkCIDR")
    if isinstance(vpc, str) and isinstance(node, str):
        try:
            inside = ipaddress.ip_network(node, strict=False).subnet_of(
                ipaddress.ip_network(vpc, strict=False)  # type: ignore[arg-type]
            )
        except (ValueError, TypeError):
            inside = True  # the CIDR itself is reported by its field
        if not inside:
            yield ConfigError(path="nodeNetworkCIDR", message="not inside vpcNetworkCIDR")
    if doc.get("layout") == "WithNAT":
        bastion = (doc.get("withNAT") or {}).get("bastionInstance") or {}
        zone, zones = bastion.get("zone"), doc.get("zones")
        if zone and isinstance(zones, list) and zone not in zones:
            yield ConfigError(path="withNAT.bastionInstance.zone", message="not one of zones")


# -- OpenStack ------------------------------------------------------------------------------
class OpenStackProvider(_Open):
    authURL: NonEmpty
    caCert: str | None = None
    domainName: NonEmpty
    tenantName: str | None = None
    tenantID: str | None = None
    username: NonEmpty
    password: SecretStr
    region: NonEmpty


class OpenStackMasterInstanceClass(_Open):
    flavorName: NonEmpty
    imageName: NonEmpty
    rootDiskSize: Annotated[int, Field(ge=1)] | None = None
    etcdDiskSizeGb: Annotated[int, Field(ge=1)] = 10
    additionalSecurityGroups: list[str] = Field(default_factory=list)
    additionalTags: Tags = Field(default_factory=dict)


class OpenStackServerGroupManual(_Open):
    id: NonEmpty


class OpenStackServerGroup(_Open):
    policy: Literal["AntiAffinity", "ManuallyManaged"]
    manuallyManaged: OpenStackServerGroupManual | None = None


class OpenStackMasterNodeGroup(_Open):
    replicas: Annotated[int, Field(ge=1)]
    instanceClass: OpenStackMasterInstanceClass
    volumeTypeMap: Annotated[dict[str, str], Field(min_length=1)]
    serverGroup: OpenStackServerGroup | None = None


class OpenStackNodeInstanceClass(_Open):
    flavorName: NonEmpty
    imageName: NonEmpty
    mainNetwork: NonEmpty
    rootDiskSize: Annotated[int, Field(ge=1)] | None = None
    additionalSecurityGroups: list[str] = Field(default_factory=list)
    additionalTags: Tags = Field(default_factory=dict)
    configDrive: bool = False
    additionalNetworks: list[str] = Field(default_factory=list)
    networksWithSecurityDisabled: list[str] = Field(default_factory=list)
    floatingIPPools: list[str] = Field(default_factory=list)


class OpenStackNodeGroup(_Open):
    name: NonEmpty
    replicas: Annotated[int, Field(ge=0)]
    instanceClass: OpenStackNodeInstanceClass
    zones: Zones | None = None
    volumeTypeMap: dict[str, str] = Field(default_factory=dict)
    nodeTemplate: NodeTemplate | None = None


class OpenStackBastionInstanceClass(_Open):
    flavorName: NonEmpty
    imageName: NonEmpty
    rootDiskSize: Annotated[int, Field(ge=1)] = 50
    additionalTags: Tags = Field(default_factory=dict)


class OpenStackBastion(_Open):
    zone: str | None = None
    volumeType: str | None = None
    instanceClass: OpenStackBastionInstanceClass | None = None


class OpenStackStandard(_Open):
    internalNetworkCIDR: Cidr
    internalNetworkDNSServers: Annotated[list[IPv4], Field(min_length=1)]
    internalNetworkSecurity: bool = True
    externalNetworkName: NonEmpty
    bastion: OpenStackBastion | None = None


class OpenStackStandardWithNoRouter(_Open):
    internalNetworkCIDR: Cidr
    internalNetworkSecurity: bool = True
    externalNetworkName: NonEmpty
    externalNetworkDHCP: bool = True


class OpenStackSimple(_Open):
    externalNetworkName: NonEmpty
    externalNetworkDHCP: bool = True
    podNetworkMode: Literal["VXLAN", "DirectRouting"] = "VXLAN"


class OpenStackSimpleWithInternalNetwork(_Open):
    internalSubnetName: NonEmpty
    podNetworkMode: Literal["VXLAN", "DirectRouting", "DirectRoutingWithPortSecurityEnabled"] = (
        "DirectRoutingWithPortSecurityEnabled"
    )
    externalNetworkName: str | None = None
    externalNetworkDHCP: bool = True
    masterWithExternalFloatingIP: bool = True


OPENSTACK_SECTIONS = {
    "Standard": "standard",
    "StandardWithNoRouter": "standardWithNoRouter",
    "Simple": "simple",
    "SimpleWithInternalNetwork": "simpleWithInternalNetwork",
}


class OpenStackClusterConfiguration(_Open):
    apiVersion: Literal["deckhouse.io/v1", "deckhouse.io/v1alpha1"]
    kind: Literal["OpenStackClusterConfiguration"]
    layout: Literal["Standard", "StandardWithNoRouter", "Simple", "SimpleWithInternalNetwork"]
    provider: OpenStackProvider
    sshPublicKey: NonEmpty
    sshAllowList: list[Cidr] = Field(default_factory=lambda: ["0.0.0.0/0"])
    tags: Tags = Field(default_factory=dict)
    zones: Zones | None = None
    masterNodeGroup: OpenStackMasterNodeGroup
    nodeGroups: list[OpenStackNodeGroup] = Field(default_factory=list)
    standard: OpenStackStandard | None = None
    standardWithNoRouter: OpenStackStandardWithNoRouter | None = None
    simple: OpenStackSimple | None = None
    simpleWithInternalNetwork: OpenStackSimpleWithInternalNetwork | None = None


def _openstack_rules(doc: Mapping[str, Any]) -> Iterable[ConfigError]:
    provider = doc.get("provider")
    if isinstance(provider, Mapping) and bool(provider.get("tenantName")) == bool(
        provider.get("tenantID")
    ):
        yield ConfigError(
            path="provider.tenantName", message="exactly one of tenantName and tenantID is required"
        )
    yield from _layout_section(doc, OPENSTACK_SECTIONS)
    for section in ("standard", "standardWithNoRouter"):
        cidr = (doc.get(section) or {}).get("internalNetworkCIDR")
        try:
            network = ipaddress.ip_network(str(cidr), strict=False) if cidr else None
        except ValueError:
            continue  # the field's own check says so
        if network is not None and str(network) != str(cidr):
            # upstream's variables.tf: cidrsubnet(cidr, 0, 0) == cidr
            yield ConfigError(
                path=f"{section}.internalNetworkCIDR",
                message="not a network address (host bits set; use the network's own address)",
            )
    group = (doc.get("masterNodeGroup") or {}).get("serverGroup")
    if (
        isinstance(group, Mapping)
        and group.get("policy") == "ManuallyManaged"
        and not (group.get("manuallyManaged") or {}).get("id")
    ):
        yield ConfigError(
            path="masterNodeGroup.serverGroup.manuallyManaged.id",
            message="required when policy is ManuallyManaged",
        )


# -- vSphere --------------------------------------------------------------------------------
class VsphereProvider(_Open):
    server: NonEmpty
    username: NonEmpty
    password: SecretStr
    insecure: bool = False
    #: PEM CA bundle of vCenter (excludes ``insecure: true``).
    caBundle: str | None = None


class VsphereIPAddress(_Open):
    address: Cidr
    gateway: IPv4
    nameservers: dict[str, list[str]] = Field(default_factory=dict)


class VsphereInstanceClass(_Open):
    numCPUs: Annotated[int, Field(ge=1)]
    memory: Annotated[int, Field(ge=1)]
    template: NonEmpty
    mainNetwork: NonEmpty
    datastore: NonEmpty
    additionalNetworks: list[str] = Field(default_factory=list)
    rootDiskSize: Annotated[int, Field(ge=1)] | None = None
    resourcePool: str | None = None
    mainNetworkIPAddresses: list[VsphereIPAddress] = Field(default_factory=list)
    runtimeOptions: dict[str, Any] = Field(default_factory=dict)


class VsphereMasterNodeGroup(_Open):
    replicas: Annotated[int, Field(ge=1)]
    zones: Zones | None = None
    instanceClass: VsphereInstanceClass


class VsphereNodeGroup(_Open):
    name: NonEmpty
    replicas: Annotated[int, Field(ge=0)]
    zones: Zones | None = None
    instanceClass: VsphereInstanceClass
    nodeTemplate: NodeTemplate | None = None


class VsphereClusterConfiguration(_Open):
    apiVersion: Literal["deckhouse.io/v1", "deckhouse.io/v1alpha1"]
    kind: Literal["VsphereClusterConfiguration"]
    layout: Literal["Standard"]
    provider: VsphereProvider
    masterNodeGroup: VsphereMasterNodeGroup
    nodeGroups: list[VsphereNodeGroup] = Field(default_factory=list)
    regionTagCategory: NonEmpty = "k8s-region"
    zoneTagCategory: NonEmpty = "k8s-zone"
    sshPublicKey: NonEmpty
    vmFolderPath: NonEmpty
    region: NonEmpty
    zones: Zones
    disableTimesync: bool = True
    externalNetworkNames: list[str] = Field(default_factory=list)
    internalNetworkNames: list[str] = Field(default_factory=list)
    internalNetworkCIDR: Cidr | None = None
    vmFolderExists: bool = False
    baseResourcePool: str | None = None
    useNestedResourcePool: bool = True
    storagePolicyID: str | None = None
    nsxt: dict[str, Any] | None = None


def _vsphere_rules(doc: Mapping[str, Any]) -> Iterable[ConfigError]:
    provider = doc.get("provider")
    if isinstance(provider, Mapping) and provider.get("caBundle") and provider.get("insecure"):
        yield ConfigError(
            path="provider.caBundle", message="caBundle and insecure: true exclude each other"
        )
    master = doc.get("masterNodeGroup") or {}
    addresses = (master.get("instanceClass") or {}).get("mainNetworkIPAddresses") or []
    replicas = master.get("replicas")
    if addresses and isinstance(replicas, int) and len(addresses) < replicas:
        yield ConfigError(
            path="masterNodeGroup.instanceClass.mainNetworkIPAddresses",
            message="fewer addresses than masterNodeGroup.replicas",
        )


# -- zVirt ----------------------------------------------------------------------------------
class ZvirtProvider(_Open):
    server: NonEmpty
    username: NonEmpty
    password: SecretStr
    caBundle: str = ""
    insecure: bool = False


class ZvirtNetworkConfig(_Open):
    networkInterfaceName: str | None = None
    networkInterfaceAddress: list[Cidr] = Field(default_factory=list)
    networkInterfaceNetmask: str | None = None
    networkInterfaceGateway: IPv4 | None = None
    dnsServers: list[IPv4] = Field(default_factory=list)


class ZvirtNodeInstanceClass(_Open):
    numCPUs: Annotated[int, Field(ge=1)]
    memory: Annotated[int, Field(ge=1)]
    template: NonEmpty
    vnicProfileID: NonEmpty
    storageDomainID: str | None = None
    rootDiskSizeGb: Annotated[int, Field(ge=1)] = 50
    etcdDiskSizeGb: Annotated[int, Field(ge=1)] = 10
    customNetworkConfig: ZvirtNetworkConfig | None = None


class ZvirtMasterInstanceClass(ZvirtNodeInstanceClass):
    storageDomainID: NonEmpty


class ZvirtMasterNodeGroup(_Open):
    replicas: Annotated[int, Field(ge=1)]
    instanceClass: ZvirtMasterInstanceClass


class ZvirtNodeGroup(_Open):
    name: NonEmpty
    replicas: Annotated[int, Field(ge=0)]
    instanceClass: ZvirtNodeInstanceClass
    nodeTemplate: NodeTemplate | None = None


_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


class ZvirtClusterConfiguration(_Open):
    apiVersion: Literal["deckhouse.io/v1", "deckhouse.io/v1alpha1"]
    kind: Literal["ZvirtClusterConfiguration"]
    layout: Literal["Standard"]
    sshPublicKey: NonEmpty
    clusterID: Annotated[str, StringConstraints(pattern=_UUID)]
    provider: ZvirtProvider
    masterNodeGroup: ZvirtMasterNodeGroup
    nodeGroups: list[ZvirtNodeGroup] = Field(default_factory=list)


def _zvirt_rules(doc: Mapping[str, Any]) -> Iterable[ConfigError]:
    master = doc.get("masterNodeGroup") or {}
    network = (master.get("instanceClass") or {}).get("customNetworkConfig") or {}
    addresses, replicas = network.get("networkInterfaceAddress") or [], master.get("replicas")
    if addresses and isinstance(replicas, int) and len(addresses) != replicas:
        yield ConfigError(
            path="masterNodeGroup.instanceClass.customNetworkConfig.networkInterfaceAddress",
            message="one address per node: not as many as masterNodeGroup.replicas",
        )


# -- DVP ------------------------------------------------------------------------------------
class DvpProvider(_Open):
    kubeconfigDataBase64: SecretStr
    namespace: NonEmpty
    networkPolicy: Literal["Isolated", "None"] = "Isolated"
    ingressPorts: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=lambda: [22])
    additionalVMLabels: dict[str, str] = Field(default_factory=dict)


class DvpCpu(_Open):
    cores: Annotated[int, Field(ge=1)]
    coreFraction: Annotated[str, StringConstraints(pattern=r"^([1-9][0-9]?|100)%$")] = "100%"


class DvpMemory(_Open):
    size: NonEmpty


class DvpVirtualMachine(_Open):
    cpu: DvpCpu
    memory: DvpMemory
    virtualMachineClassName: NonEmpty
    bootloader: Literal["BIOS", "EFI", "EFIWithSecureBoot"] = "EFI"
    runPolicy: str = "AlwaysOnUnlessStoppedManually"
    liveMigrationPolicy: str = "PreferForced"
    ipAddresses: list[str] = Field(default_factory=list)
    additionalLabels: dict[str, str] = Field(default_factory=dict)
    additionalAnnotations: dict[str, str] = Field(default_factory=dict)
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    priorityClassName: str | None = None
    tolerations: list[dict[str, Any]] = Field(default_factory=list)


class DvpImage(_Open):
    kind: Literal["ClusterVirtualImage", "VirtualImage"]
    name: NonEmpty


class DvpRootDisk(_Open):
    size: NonEmpty
    storageClass: str | None = None
    image: DvpImage


class DvpDisk(_Open):
    size: NonEmpty
    storageClass: str | None = None


class DvpAdditionalDisk(_Open):
    size: NonEmpty
    storageClass: NonEmpty


class DvpMasterInstanceClass(_Open):
    virtualMachine: DvpVirtualMachine
    rootDisk: DvpRootDisk
    etcdDisk: DvpDisk
    additionalDisks: list[DvpAdditionalDisk] = Field(default_factory=list)
    additionalLabels: dict[str, str] = Field(default_factory=dict)


class DvpNodeInstanceClass(_Open):
    virtualMachine: DvpVirtualMachine
    rootDisk: DvpRootDisk
    additionalDisks: list[DvpAdditionalDisk] = Field(default_factory=list)


class DvpMasterNodeGroup(_Open):
    replicas: Annotated[int, Field(ge=1)]
    zones: Zones | None = None
    instanceClass: DvpMasterInstanceClass


class DvpNodeGroup(_Open):
    name: NonEmpty
    replicas: Annotated[int, Field(ge=0)]
    zones: Zones | None = None
    nodeTemplate: NodeTemplate | None = None
    instanceClass: DvpNodeInstanceClass


class DVPClusterConfiguration(_Open):
    apiVersion: Literal["deckhouse.io/v1", "deckhouse.io/v1alpha1"]
    kind: Literal["DVPClusterConfiguration"]
    layout: Literal["Standard"]
    sshPublicKey: NonEmpty
    provider: DvpProvider
    region: str | None = None
    zones: Zones | None = None
    masterNodeGroup: DvpMasterNodeGroup
    nodeGroups: list[DvpNodeGroup] = Field(default_factory=list)


def _dvp_rules(doc: Mapping[str, Any]) -> Iterable[ConfigError]:
    master = doc.get("masterNodeGroup") or {}
    vm = (master.get("instanceClass") or {}).get("virtualMachine") or {}
    addresses, replicas = vm.get("ipAddresses") or [], master.get("replicas")
    if addresses and isinstance(replicas, int) and len(addresses) != replicas:
        yield ConfigError(
            path="masterNodeGroup.instanceClass.virtualMachine.ipAddresses",
            message="one address (or Auto) per replica: not as many as masterNodeGroup.replicas",
        )
    for index, address in enumerate(addresses):
        if address != "Auto":
            try:
                ipaddress.IPv4Address(str(address))
            except ValueError:
                yield ConfigError(
                    path=f"masterNodeGroup.instanceClass.virtualMachine.ipAddresses[{index}]",
                    message="neither an IPv4 address nor Auto",
                )


# -- every document -------------------------------------------------------------------------
ProviderConfiguration = (
    AWSClusterConfiguration
    | OpenStackClusterConfiguration
    | VsphereClusterConfiguration
    | ZvirtClusterConfiguration
    | DVPClusterConfiguration
)
Rules = Callable[[Mapping[str, Any]], Iterable[ConfigError]]

#: kind → (model, cross-field rules).
DOCUMENTS: dict[str, tuple[type[BaseModel], Rules]] = {
    "AWSClusterConfiguration": (AWSClusterConfiguration, _aws_rules),
    "OpenStackClusterConfiguration": (OpenStackClusterConfiguration, _openstack_rules),
    "VsphereClusterConfiguration": (VsphereClusterConfiguration, _vsphere_rules),
    "ZvirtClusterConfiguration": (ZvirtClusterConfiguration, _zvirt_rules),
    "DVPClusterConfiguration": (DVPClusterConfiguration, _dvp_rules),
}
KIND_SUFFIX = "ClusterConfiguration"


def _layout_section(doc: Mapping[str, Any], sections: Mapping[str, str]) -> Iterable[ConfigError]:
    section = sections.get(str(doc.get("layout")))
    if section is not None and not isinstance(doc.get(section), Mapping):
        yield ConfigError(path=section, message="required for the document's layout")


def _common_rules(doc: Mapping[str, Any]) -> Iterable[ConfigError]:
    key = doc.get("sshPublicKey")
    if isinstance(key, str) and key and not key.strip().startswith(_SSH_KEY_TYPES):
        yield ConfigError(path="sshPublicKey", message="not an OpenSSH public key")
    groups = doc.get("nodeGroups")
    if isinstance(groups, list):
        seen: set[str] = set()
        for index, group in enumerate(groups):
            name = group.get("name") if isinstance(group, Mapping) else None
            if not isinstance(name, str):
                continue
            if name in seen:
                yield ConfigError(
                    path=f"nodeGroups[{index}].name", message="duplicate node group name"
                )
            seen.add(name)
            if not PREFIX_PATTERN.match(name):
                yield ConfigError(
                    path=f"nodeGroups[{index}].name",
                    message="must be lower case letters, digits and '-' (a node name)",
                )


def validate_document(doc: Any, *, source: str = "") -> ProviderConfiguration:
    """The document as its model; :class:`InvalidConfig` with every error otherwise."""
    if not isinstance(doc, Mapping):
        raise InvalidConfig([ConfigError(path="", message="not a YAML mapping")], source)
    kind = doc.get("kind")
    if not isinstance(kind, str) or kind not in DOCUMENTS:
        raise InvalidConfig(
            [
                ConfigError(
                    path="kind",
                    message=f"not one of {', '.join(sorted(DOCUMENTS))}",
                )
            ],
            source,
        )
    model, rules = DOCUMENTS[str(kind)]
    errors: list[ConfigError] = []
    parsed: BaseModel | None = None
    try:
        parsed = model.model_validate(doc)
    except ValidationError as exc:
        errors += [ConfigError(path=p.path, message=p.message) for p in field_problems(exc)]
    errors += _cross_field(_common_rules, doc, parsed)
    errors += _cross_field(rules, doc, parsed)
    if errors or parsed is None:
        raise InvalidConfig(errors, source)
    return parsed  # type: ignore[return-value]


def _cross_field(
    rules: Rules, doc: Mapping[str, Any], parsed: BaseModel | None
) -> list[ConfigError]:
    """The errors of ``rules`` over the raw document; a section of the wrong shape (a string
    where a mapping belongs) is its field's own error, so the rules that trip on it add none —
    unless the fields all parsed, then the document is refused as a whole."""
    try:
        return list(rules(doc))
    except (AttributeError, TypeError, KeyError, IndexError, ValueError):
        if parsed is None:
            return []
        return [ConfigError(path="", message="the cross-field rules cannot read this document")]


def provider_of(config: ProviderConfiguration) -> str:
    """The provider name of a validated document: its kind without ``ClusterConfiguration``,
    lower case (``AWSClusterConfiguration`` → the ``aws`` provider); provider names stay in
    the cloud packages and the registry."""
    return config.kind.removesuffix(KIND_SUFFIX).lower()


# -- the cluster --------------------------------------------------------------------------
class ClusterIdentity(BaseModel):
    """``ClusterConfiguration``'s part a layout uses: ``cloud.prefix``, ``podSubnetCIDR``, and
    the cluster UUID (ConfigMap ``kube-system/d8-cluster-uuid``)."""

    prefix: str
    uuid: str
    pod_subnet_cidr: str = DEFAULT_POD_SUBNET


def cluster_identity(
    cluster_configuration: Mapping[str, Any] | None,
    *,
    prefix: str | None = None,
    uuid: str | None = None,
    pod_subnet_cidr: str | None = None,
) -> ClusterIdentity:
    """The identity from a ``ClusterConfiguration`` document with the flags winning over it;
    :class:`InvalidConfig` lists every problem."""
    doc = cluster_configuration or {}
    errors: list[ConfigError] = []
    cloud = doc.get("cloud") if isinstance(doc.get("cloud"), Mapping) else {}
    assert isinstance(cloud, Mapping)
    prefix = prefix or cloud.get("prefix")
    if not prefix:
        errors.append(ConfigError(path="cloud.prefix", message="required (or --prefix)"))
    elif not PREFIX_PATTERN.match(str(prefix)) or len(str(prefix)) > 48:
        errors.append(
            ConfigError(
                path="cloud.prefix",
                message="lower case letters, digits and '-' (at most 48)",
            )
        )
    uuid = uuid or doc.get("clusterUUID")
    if not uuid:
        errors.append(ConfigError(path="clusterUUID", message="required (--cluster-uuid)"))
    elif not re.match(_UUID, str(uuid)):
        errors.append(ConfigError(path="clusterUUID", message="not a UUID"))
    pod = pod_subnet_cidr or doc.get("podSubnetCIDR") or DEFAULT_POD_SUBNET
    try:
        _cidr(str(pod))
    except ValueError as exc:
        errors.append(ConfigError(path="podSubnetCIDR", message=str(exc)))
    if errors:
        raise InvalidConfig(errors, "ClusterConfiguration")
    return ClusterIdentity(prefix=str(prefix), uuid=str(uuid), pod_subnet_cidr=str(pod))


class LoadedConfig(BaseModel):
    """A config file's documents: the provider's, and the cluster's identity."""

    provider: str
    document: Any  # ProviderConfiguration (kept ``Any`` so the union stays one model)
    cluster: ClusterIdentity


def load_documents(
    docs: Iterable[Any],
    *,
    source: str = "",
    prefix: str | None = None,
    uuid: str | None = None,
    pod_subnet_cidr: str | None = None,
) -> LoadedConfig:
    """One ``<Provider>ClusterConfiguration`` and at most one ``ClusterConfiguration`` from a
    multi-document YAML; every error of both at once."""
    provider_docs: list[Any] = []
    cluster_doc: Mapping[str, Any] | None = None
    errors: list[ConfigError] = []
    for index, doc in enumerate(d for d in docs if d is not None):
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        kind = kind if isinstance(kind, str) else None  # a list or a map is no kind either
        if kind == "ClusterConfiguration":
            cluster_doc = doc
        elif kind in DOCUMENTS:
            provider_docs.append(doc)
        else:
            errors.append(
                ConfigError(
                    path=f"[{index}].kind",
                    message="not a ClusterConfiguration or <Provider>ClusterConfiguration",
                )
            )
    if len(provider_docs) != 1:
        errors.append(
            ConfigError(
                path="",
                message=f"expected one <Provider>ClusterConfiguration, found {len(provider_docs)}",
            )
        )
    document: ProviderConfiguration | None = None
    if len(provider_docs) == 1:
        try:
            document = validate_document(provider_docs[0])
        except InvalidConfig as exc:
            errors += exc.errors
    cluster: ClusterIdentity | None = None
    try:
        cluster = cluster_identity(
            cluster_doc, prefix=prefix, uuid=uuid, pod_subnet_cidr=pod_subnet_cidr
        )
    except InvalidConfig as exc:
        errors += exc.errors
    if errors or document is None or cluster is None:
        raise InvalidConfig(errors, source)
    return LoadedConfig(provider=provider_of(document), document=document, cluster=cluster)


def public_document(config: BaseModel) -> dict[str, Any]:
    """``config`` in the upstream shape without its credentials (every ``SecretStr`` field):
    what may enter a workflow input, a log or a plan's output."""

    def strip(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return {
                name: strip(getattr(value, name))
                for name in [*type(value).model_fields, *(value.model_extra or {})]
                if not isinstance(getattr(value, name), SecretStr)
                and getattr(value, name) is not None
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        return value

    result = strip(config)
    assert isinstance(result, dict)
    return result
