"""AWS machines for Cluster API: launch (or adopt) an EC2 instance, read it, terminate it.

The steps follow MCM's AWS driver (Deckhouse's AWS node groups) with CAPA's object names; what
the AWSMachine leaves out comes from the settings (Deckhouse's ``aws`` provider values).
Each step and why: docs/decisions/0052-aws-machines-mcm-steps-capa-names.md.

Rules:
- Find before create: ``DescribeInstances`` by ``Name``, the cluster tag and the ownership tag (the
  InfraMachine's UID), live states only; a match is adopted (the oldest). Tags go on at launch.
- ``ClientToken`` = the InfraMachine's UID; a token naming an instance no longer live fails the
  create with ``InvalidRequest`` rather than loop.
- Source/destination check is turned off after the launch, as MCM does; an adopted instance too.
- Delete terminates every instance of the machine and waits (``delete_wait_s`` per call) until
  none is left; then a left-over detached volume carrying the machine's UID is deleted.
- Errors: quota → ``QuotaExceeded``; no capacity → ``InsufficientCapacity`` (both retryable); an
  unknown AMI, subnet, security group or instance type → ``InvalidRequest``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.machine_spec import (
    LIVE_STATES,
    OWNER_TAG,
    AwsMachineSpec,
    instance_tags,
    launch_order,
    lookup_filters,
    parse_machine_spec,
    state_name,
    tag_list,
    to_machine,
)

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef, InstanceTypeDef

log = logging.getLogger(__name__)

#: The root device of an image that does not say (Amazon Linux, Ubuntu: /dev/xvda, /dev/sda1).
DEFAULT_ROOT_DEVICE = "/dev/xvda"


class AwsMachines:
    """Cluster API machines (EC2 instances) on the session."""

    def __init__(self, session: AwsBase) -> None:
        self.session = session

    # -- reads -----------------------------------------------------------------------------
    def _machine_instances(
        self, spec: models.MachineSpec, states: tuple[str, ...]
    ) -> list[InstanceTypeDef]:
        """This machine's instances in ``states``, oldest first."""
        filters = lookup_filters(self._cluster(), spec.name, spec.machine_uid, states)
        found: list[InstanceTypeDef] = []
        paginator = self.session.client("ec2").get_paginator("describe_instances")
        with calling("DescribeInstances"):
            for page in paginator.paginate(Filters=filters):
                for reservation in page.get("Reservations", []):
                    found += reservation.get("Instances", [])
        return sorted(found, key=launch_order)

    def _cluster(self) -> str:
        if not self.session.cluster:
            raise errors.InvalidRequest(NAME, "CreateMachine", "the cluster name is not set")
        return self.session.cluster

    # -- create ----------------------------------------------------------------------------
    def create_machine(self, spec: models.MachineSpec, user_data: bytes) -> models.Machine:
        machine = parse_machine_spec(spec.provider_spec)
        found = self._machine_instances(spec, LIVE_STATES)
        if found:
            raw = found[0]
            log.info(
                "aws: adopting instance %s of machine %s (%s)",
                raw["InstanceId"],
                spec.name,
                state_name(raw),
            )
        else:
            raw = self._run_instance(spec, machine, user_data)
        if raw.get("SourceDestCheck", True) is not False:
            self._disable_source_dest_check(str(raw["InstanceId"]))
        return to_machine(raw)

    def _run_instance(
        self, spec: models.MachineSpec, machine: AwsMachineSpec, user_data: bytes
    ) -> InstanceTypeDef:
        request = self._launch_request(spec, machine, user_data)
        try:
            with calling("RunInstances"):
                answer = self.session.client("ec2").run_instances(**request)
        except errors.NotFound as exc:  # InvalidAMIID/InvalidSubnetID/InvalidGroup.NotFound
            raise errors.InvalidRequest(NAME, "RunInstances", exc.message) from exc
        [raw] = answer["Instances"]
        if state_name(raw) not in LIVE_STATES:
            raise errors.InvalidRequest(
                NAME,
                "RunInstances",
                f"instance {raw['InstanceId']} of machine {spec.name} is {state_name(raw)} "
                "(terminated outside cloudloop); the machine must be replaced",
            )
        log.info(
            "aws: launched instance %s for machine %s (%s, %s)",
            raw["InstanceId"],
            spec.name,
            request["InstanceType"],
            raw.get("Placement", {}).get("AvailabilityZone", ""),
        )
        return raw.copy()

    def _launch_request(
        self, spec: models.MachineSpec, machine: AwsMachineSpec, user_data: bytes
    ) -> dict[str, Any]:
        """RunInstances' parameters (the user data stays bytes: botocore base64-encodes it)."""
        defaults = self.session.settings.instances
        if spec.failure_domain and not self.session.settings.allows_zone(spec.failure_domain):
            raise errors.InvalidRequest(
                NAME,
                "CreateMachine",
                f"failure domain {spec.failure_domain!r} is not one of the cluster's zones "
                f"({', '.join(self.session.settings.zones)})",
            )
        ami = machine.ami.id if machine.ami is not None else defaults.ami
        if not ami:
            raise errors.InvalidRequest(
                NAME, "CreateMachine", "no AMI: set spec.ami.id or the cluster's instances.ami"
            )
        groups = list(
            dict.fromkeys(
                [*defaults.additional_security_groups]
                + [ref.id for ref in machine.additional_security_groups]
            )
        )
        interface: dict[str, Any] = {
            "DeviceIndex": 0,
            "SubnetId": self._subnet(spec, machine),
            "DeleteOnTermination": True,
            "AssociatePublicIpAddress": (
                machine.public_ip
                if machine.public_ip is not None
                else defaults.associate_public_ip_address
            ),
        }
        if groups:
            interface["Groups"] = groups
        ebs: dict[str, Any] = {"DeleteOnTermination": True, "VolumeSize": 20, "VolumeType": "gp2"}
        if machine.root_volume is not None:
            ebs.update(VolumeSize=machine.root_volume.size, VolumeType=machine.root_volume.type)
            if machine.root_volume.iops is not None:
                ebs["Iops"] = machine.root_volume.iops
        tags = tag_list(
            instance_tags(
                self._cluster(),
                spec.name,
                spec.machine_uid,
                self.session.settings.tags,
                machine.additional_tags,
            )
        )
        request: dict[str, Any] = {
            "ImageId": ami,
            "InstanceType": machine.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": user_data,
            "ClientToken": spec.machine_uid,
            "NetworkInterfaces": [interface],
            "BlockDeviceMappings": [{"DeviceName": self._root_device(ami), "Ebs": ebs}],
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "volume", "Tags": tags},
            ],
        }
        metadata = {
            key: value
            for key, value in (
                ("HttpTokens", machine.http_tokens or defaults.http_tokens),
                (
                    "HttpPutResponseHopLimit",
                    machine.http_put_response_hop_limit or defaults.http_put_response_hop_limit,
                ),
            )
            if value is not None
        }
        if metadata:
            request["MetadataOptions"] = metadata
        profile = machine.iam_instance_profile or defaults.iam_profile_name
        if profile:
            request["IamInstanceProfile"] = {"Name": profile}
        key_name = machine.ssh_key_name or self.session.settings.key_name
        if key_name:
            request["KeyName"] = key_name
        if machine.spot:
            request["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        return request

    def _subnet(self, spec: models.MachineSpec, machine: AwsMachineSpec) -> str:
        if machine.subnet is not None:
            return machine.subnet.id
        subnets = self.session.settings.zone_to_subnet_id_map
        zone = spec.failure_domain
        if not zone and len(subnets) == 1:
            zone = next(iter(subnets))
        if zone in subnets:
            return subnets[zone]
        raise errors.InvalidRequest(
            NAME,
            "CreateMachine",
            f"no subnet for failure domain {zone!r}: set spec.subnet.id or "
            f"zone_to_subnet_id_map (zones: {', '.join(sorted(subnets)) or 'none'})",
        )

    def _root_device(self, ami: str) -> str:
        """The image's root device name; an unknown image is ``InvalidRequest``."""
        try:
            with calling("DescribeImages"):
                images = (
                    self.session.client("ec2").describe_images(ImageIds=[ami]).get("Images", [])
                )
        except errors.NotFound as exc:
            raise errors.InvalidRequest(NAME, "DescribeImages", exc.message) from exc
        if not images:
            raise errors.InvalidRequest(NAME, "DescribeImages", f"no image {ami}")
        return str(images[0].get("RootDeviceName") or DEFAULT_ROOT_DEVICE)

    def _disable_source_dest_check(self, instance_id: str) -> None:
        with calling("ModifyInstanceAttribute"):
            self.session.client("ec2").modify_instance_attribute(
                InstanceId=instance_id, SourceDestCheck={"Value": False}
            )

    # -- read ------------------------------------------------------------------------------
    def get_machine(self, spec: models.MachineSpec) -> models.Machine | None:
        """The machine's live instance; else a terminating or terminated one (reported as
        failed); ``None`` only when EC2 lists none of this machine's instances."""
        found = self._machine_instances(spec, (*LIVE_STATES, "shutting-down", "terminated"))
        live = [raw for raw in found if state_name(raw) in LIVE_STATES]
        chosen = live[0] if live else (found[-1] if found else None)
        return to_machine(chosen) if chosen is not None else None

    # -- delete ----------------------------------------------------------------------------
    def delete_machine(self, spec: models.MachineSpec) -> bool:
        """Terminate every instance of the machine; ``True`` once none is left (terminated) and
        no volume of the machine remains; ``False`` while EC2 is still shutting one down."""
        deadline = time.monotonic() + self.session.settings.delete_wait_s
        terminated: set[str] = set()
        while True:
            found = self._machine_instances(spec, (*LIVE_STATES, "shutting-down"))
            live = [str(raw["InstanceId"]) for raw in found if state_name(raw) in LIVE_STATES]
            fresh = [instance_id for instance_id in live if instance_id not in terminated]
            if fresh:
                self._terminate(fresh, spec.name)
                terminated.update(fresh)
            elif not found and self._volumes_gone(spec):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.session.settings.poll_interval_s)

    def _terminate(self, instance_ids: list[str], machine: str) -> None:
        try:
            with calling("TerminateInstances"):
                self.session.client("ec2").terminate_instances(InstanceIds=instance_ids)
        except errors.NotFound:
            return  # gone meanwhile
        log.info("aws: terminating instance(s) %s of machine %s", ", ".join(instance_ids), machine)

    def _volumes_gone(self, spec: models.MachineSpec) -> bool:
        """No volume tagged with the machine's UID is left; a detached one is deleted (the root
        volume goes with the instance: only a volume someone detached can be left)."""
        filters: list[FilterTypeDef] = [{"Name": f"tag:{OWNER_TAG}", "Values": [spec.machine_uid]}]
        with calling("DescribeVolumes"):
            volumes = (
                self.session.client("ec2").describe_volumes(Filters=filters).get("Volumes", [])
            )
        left = False
        for volume in volumes:
            if volume.get("State") == "available":
                try:
                    with calling("DeleteVolume"):
                        self.session.client("ec2").delete_volume(VolumeId=volume["VolumeId"])
                    log.info(
                        "aws: deleted left-over volume %s of %s", volume["VolumeId"], spec.name
                    )
                except errors.NotFound:
                    continue
            if volume.get("State") != "deleted":
                left = True
        return not left
