"""An AWS layout on moto (tests, bench, the dev demo): its configuration, and what it left.

- :func:`layout_config`: an example ``<Provider>ClusterConfiguration`` with a prefix and moto's
  keys, written to a file the workers read;
- :func:`cluster_resources`: every resource of a cluster, found by its names.

Rules: :func:`cluster_resources` is read-only; a resource counts when its ``Name`` tag (EC2)
or its name (IAM, key pairs) starts with the cluster's prefix and it is live (instances not
terminated, NAT gateways not deleted), so a duplicate shows as two entries and a clean destroy
as none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from devstack.backends.aws import aws_client

_LIVE_INSTANCES = ["pending", "running", "stopping", "stopped", "shutting-down"]


def layout_config(
    example: Path, folder: Path, prefix: str, secret: str = "testing", name: str = "cluster.yaml"
) -> Path:
    """``example`` with ``prefix`` and moto's keys (``secret`` as the secret key), written to
    ``folder/name``."""
    docs = list(yaml.safe_load_all(example.read_text()))
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
        else:
            doc["provider"].update(providerAccessKeyId="testing", providerSecretAccessKey=secret)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump_all(docs))
    return path


def cluster_resources(endpoint: str, prefix: str) -> list[str]:
    """``<type>/<name>`` of every live resource of the cluster ``prefix`` (repeats included)."""
    ec2, iam = aws_client("ec2", endpoint), aws_client("iam", endpoint)
    named = [{"Name": "tag-key", "Values": ["Name"]}]
    found: list[str] = []

    def add(kind: str, item: dict[str, Any]) -> None:
        name = {t["Key"]: t["Value"] for t in item.get("Tags", [])}.get("Name", "")
        if name.startswith(prefix):
            found.append(f"{kind}/{name}")

    calls: list[tuple[Any, str]] = [
        (ec2.describe_vpcs, "Vpcs"),
        (ec2.describe_subnets, "Subnets"),
        (ec2.describe_route_tables, "RouteTables"),
        (ec2.describe_internet_gateways, "InternetGateways"),
        (ec2.describe_addresses, "Addresses"),
        (ec2.describe_volumes, "Volumes"),
        (ec2.describe_security_groups, "SecurityGroups"),
    ]
    for call, key in calls:
        for item in call(Filters=named)[key]:
            add(key, item)
    live_nat = [{"Name": "state", "Values": ["pending", "available"]}]
    for nat in ec2.describe_nat_gateways(Filters=live_nat)["NatGateways"]:
        add("NatGateways", nat)
    live = [{"Name": "instance-state-name", "Values": _LIVE_INSTANCES}]
    for reservation in ec2.describe_instances(Filters=live)["Reservations"]:
        for instance in reservation["Instances"]:
            add("Instances", instance)
    found += [
        f"Role/{r['RoleName']}"
        for r in iam.list_roles()["Roles"]
        if r["RoleName"].startswith(prefix)
    ]
    found += [
        f"InstanceProfile/{p['InstanceProfileName']}"
        for p in iam.list_instance_profiles()["InstanceProfiles"]
        if p["InstanceProfileName"].startswith(prefix)
    ]
    keys = ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [prefix]}])["KeyPairs"]
    found += [f"KeyPair/{k['KeyName']}" for k in keys]
    return sorted(found)
