"""The AWS section of the settings (``CLOUDLOOP_AWS__*``): region, endpoint and credentials, and
the cluster's node defaults (Deckhouse's ``aws`` provider values) for node groups.

Where each Deckhouse setting lands: ``tags`` on every instance and root volume the machines part
launches, every EBS volume and snapshot the CSI controller makes, and every load balancer, target
group and security group the CCM makes (a Service's ``additional-resource-tags`` and a class's
``additionalTags`` win); ``zones`` restricts the zones published in the discovery data (so the
StorageClasses' ``allowedTopologies`` and the node manager's zones) and refuses a machine in any
other zone; ``instances.additional_security_groups`` goes on every machine;
``load_balancer_security_group`` is a Classic ELB's group when the Service names none (upstream's
``ElbSecurityGroup``: no per-Service group is made); ``instances.http_tokens``/
``instances.http_put_response_hop_limit`` are every machine's IMDS options (IMDSv2).

Credentials come from a mounted shared-credentials file, the standard chain, or SecretStr values;
they never print. A cloud that does not answer within ``timeout_s`` is an error, never "gone".
"""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class AwsNodeDefaults(BaseModel):
    """Deckhouse's ``aws.instances``: what every node-group instance gets unless its class says."""

    #: The AMI of an instance class without ``ami`` (Deckhouse: the masters' image).
    ami: str = ""
    #: Security groups of every node (Deckhouse: the ``<prefix>-node`` group).
    additional_security_groups: list[str] = Field(default_factory=list)
    #: A public IPv4 address on each node (Deckhouse: true in the WithoutNAT layout).
    associate_public_ip_address: bool = False
    #: The IAM instance profile of nodes (Deckhouse: ``<prefix>-node``).
    iam_profile_name: str = ""
    #: IMDS ``HttpTokens`` of every machine (``required``: IMDSv2 only); unset: the AMI's default.
    http_tokens: Literal["optional", "required"] | None = None
    #: IMDS ``HttpPutResponseHopLimit`` (1 keeps the tokens from pods on the pod network).
    http_put_response_hop_limit: int | None = Field(default=None, ge=1, le=64)


class AwsSettings(BaseModel):
    #: a refused setting is named, never printed (its value may be a credential)
    model_config = ConfigDict(hide_input_in_errors=True)

    region: str = "us-east-1"
    #: Emulator or VPC endpoint; unset means the real AWS endpoints.
    endpoint_url: str | None = None
    #: An AWS shared-credentials file (mounted from a Secret); the standard chain when unset.
    credentials_file: Path | None = None
    profile: str | None = None
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    #: Per-request connect/read timeout; a cloud that does not answer is an error, never "gone".
    timeout_s: float = 10.0
    max_attempts: int = 3

    # -- node groups (Cluster API machines; Deckhouse's ``aws`` provider values) --------------
    instances: AwsNodeDefaults = Field(default_factory=AwsNodeDefaults)
    #: The cluster's subnet in each zone (Deckhouse ``internal.zoneToSubnetIdMap``): a machine
    #: without ``subnet`` goes into its failure domain's subnet.
    zone_to_subnet_id_map: dict[str, str] = Field(default_factory=dict)
    #: The zones announced to the node manager; unset: the zones of ``zone_to_subnet_id_map``.
    zones: list[str] = Field(default_factory=list)
    #: The EC2 key pair of nodes (Deckhouse ``keyName`` = the cluster prefix).
    key_name: str = ""
    #: ``AWSClusterConfiguration.tags``: on every instance, volume, snapshot, load balancer and
    #: security group cloudloop makes (see the module docstring); more specific tags win.
    tags: dict[str, str] = Field(default_factory=dict)
    #: Deckhouse ``loadBalancerSecurityGroup``: a Classic ELB's group unless the Service's
    #: ``aws-load-balancer-security-groups`` names others (upstream's ``ElbSecurityGroup``).
    load_balancer_security_group: str = ""
    #: ``sshPublicKey`` of the registration Secret (the CAPI bootstrap's authorized key).
    ssh_public_key: str = ""
    #: How long one delete call waits for ``shutting-down`` to end before it returns (and is
    #: called again): short, so the delete activity heartbeats between calls.
    delete_wait_s: float = 5.0
    #: How often a waiting delete polls.
    poll_interval_s: float = 1.0

    def zone_names(self) -> list[str]:
        return list(self.zones) or sorted(self.zone_to_subnet_id_map)

    def allows_zone(self, zone: str) -> bool:
        """Whether ``zones`` (unset: every zone) lets volumes and machines go to ``zone``."""
        return not self.zones or zone in self.zones

    def static_credentials(self) -> tuple[str, str]:
        """The access key pair for the registration Secret: the SecretStr values, else the
        credentials file's profile; empty strings when neither (the standard chain, IRSA)."""
        key, secret = self.access_key_id, self.secret_access_key
        if key is not None and secret is not None:
            return key.get_secret_value(), secret.get_secret_value()
        if self.credentials_file is not None and self.credentials_file.is_file():
            parser = configparser.ConfigParser()
            parser.read(self.credentials_file)
            section = self.profile or "default"
            if parser.has_section(section):
                return (
                    parser.get(section, "aws_access_key_id", fallback=""),
                    parser.get(section, "aws_secret_access_key", fallback=""),
                )
        return "", ""
