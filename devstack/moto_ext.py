"""moto's server with the load-balancer behaviour AWS has and moto 5 lacks, added in its process.

The local stack starts moto through this module; it changes moto's ELB models where they depart
from the AWS API reference, and changes nothing else:

- Classic ELB listeners keep their ``InstanceProtocol`` (moto answers with the front-end protocol,
  so an HTTPS→HTTP listener looked like HTTPS→HTTPS), and a listener added later gets a back-end
  entry, so ``SetLoadBalancerPoliciesForBackendServer`` on its instance port takes effect (moto
  only knew the ports of the listeners an ELB was created with).
- ``DeleteLoadBalancerListeners`` with several ports deletes them all (moto kept every listener
  when given more than one port).
- ``DescribeLoadBalancerPolicies`` without ``LoadBalancerName`` lists the predefined SSL
  negotiation policies (the Classic ELB security policies), and a ``PolicyNames`` filter naming
  an unknown one is ``PolicyNotFound``, as in AWS.
- A subnet's IPv6 CIDR association shows ``Ipv6CidrBlockState.State: associated`` (moto nested
  the state object in itself), which is how a dual-stack NLB's subnets are recognised.
- NLB ``ModifyListener`` accepts the TLS, UDP and TCP_UDP protocols (moto: HTTP, HTTPS, TCP
  only), checks a TLS listener's certificate as for HTTPS, and a listener that leaves TLS (or
  HTTPS) drops its certificates and SSL policy, as AWS does.
- NLB ``SubnetMappings`` are kept: each zone shows its ``LoadBalancerAddresses`` (the Elastic IP's
  ``AllocationId`` and address, or the ``PrivateIPv4Address``), and an unknown allocation is
  ``AllocationIdNotFound``.
- EC2 instances go through AWS's transitional states when asked: with a lifecycle set
  (``POST /_cloudloop/moto/ec2-lifecycle`` ``{"pending_s": p, "shutting_down_s": s}``, served by
  this process; ``{}`` sets both back to 0) a new instance is ``pending`` for ``p`` seconds before
  ``running``, and a terminated one ``shutting-down`` for ``s`` seconds before ``terminated``
  (its delete-on-termination volumes go then, as in AWS). moto moves both instantly otherwise.
  The same lifecycle's ``volume_creating_s`` keeps a new EBS volume ``creating`` that long
  before ``available`` (moto makes it available at once).
- ``RunInstances`` checks its image and instance type, as AWS does (``InvalidAMIID.NotFound``,
  ``InvalidInstanceType``): moto's own switches for both (``MOTO_ENABLE_AMI_VALIDATION``,
  ``MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION``) are turned on; and the security groups of its
  network interfaces must exist (``InvalidGroup.NotFound``; moto made up a group of that ID).
- An EC2 resource reads its own tags by its id (moto scanned every tag of the region, with a
  regular expression per tag, for every resource it rendered: a 1,000-instance page took
  seconds); the tags shown are the same.

It patches moto's classes when imported, so it must be the moto server's ``__main__``:
``python -m devstack.moto_ext -H 127.0.0.1 -p PORT`` (the arguments of ``moto_server``).
Tested through boto3 in ``tests/devstack/test_moto_ext.py``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from moto import settings as moto_settings
from moto.ec2.exceptions import InvalidSecurityGroupNotFoundError
from moto.ec2.models import amis as ami_models
from moto.ec2.models import core as ec2_core_models
from moto.ec2.models import ec2_backends
from moto.ec2.models import instances as instance_models
from moto.ec2.models import subnets as subnet_models
from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix
from moto.elb import models as elb_models
from moto.elb.exceptions import PolicyNotFoundError
from moto.elb.policies import OtherPolicy
from moto.elbv2 import models as elbv2_models
from moto.elbv2.exceptions import ELBClientError

#: The predefined SSL negotiation policies of Classic Load Balancers (AWS documentation,
#: "Predefined SSL security policies for Classic Load Balancers").
CLASSIC_SSL_POLICIES = (
    "ELBSecurityPolicy-TLS-1-2-2017-01",
    "ELBSecurityPolicy-TLS-1-1-2017-01",
    "ELBSecurityPolicy-2016-08",
    "ELBSecurityPolicy-2015-05",
    "ELBSecurityPolicy-2015-03",
    "ELBSecurityPolicy-2015-02",
    "ELBSecurityPolicy-2014-10",
    "ELBSecurityPolicy-2014-01",
    "ELBSecurityPolicy-2011-08",
    "ELBSample-ELBDefaultCipherPolicy",
    "ELBSample-OpenSSLDefaultCipherPolicy",
)
_PATCHED = "_cloudloop_moto_ext"


def _port_value(port: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if port.get(key) is not None:
            return port[key]
    return None


def _keep_instance_protocols(balancer: Any, ports: list[dict[str, Any]]) -> None:
    """Record each listener's requested ``InstanceProtocol`` and give its port a back end."""
    wanted = {int(_port_value(p, "LoadBalancerPort", "load_balancer_port")): p for p in ports if p}
    for listener in balancer.listeners:
        port = wanted.get(int(listener.load_balancer_port))
        if port is not None and getattr(listener, "_instance_protocol", None) is None:
            protocol = _port_value(port, "InstanceProtocol", "instance_protocol")
            listener._instance_protocol = str(protocol or listener.protocol).upper()
    known = {int(b.instance_port) for b in balancer.backends}
    for listener in balancer.listeners:
        if int(listener.instance_port) not in known:
            balancer.backends.append(elb_models.FakeBackend(instance_port=listener.instance_port))
            known.add(int(listener.instance_port))


def _patch_classic() -> None:
    listener_cls: Any = elb_models.FakeListener
    listener_cls.instance_protocol = property(
        lambda self: getattr(self, "_instance_protocol", None) or self.protocol
    )
    backend_cls: Any = elb_models.ELBBackend
    create = backend_cls.create_load_balancer
    add_listeners = backend_cls.create_load_balancer_listeners
    describe_policies = backend_cls.describe_load_balancer_policies

    def create_load_balancer(self: Any, *args: Any, **kwargs: Any) -> Any:
        balancer = create(self, *args, **kwargs)
        ports = kwargs.get("ports") if "ports" in kwargs else args[2]
        _keep_instance_protocols(balancer, list(ports or []))
        return balancer

    def create_load_balancer_listeners(self: Any, name: str, ports: list[dict[str, Any]]) -> Any:
        balancer = add_listeners(self, name, ports)
        if balancer is not None:
            _keep_instance_protocols(balancer, list(ports or []))
        return balancer

    def describe_load_balancer_policies(
        self: Any, lb_name: str | None, policy_names: list[str]
    ) -> list[Any]:
        if lb_name:
            return list(describe_policies(self, lb_name, policy_names))
        samples = [
            OtherPolicy(
                name,
                "SSLNegotiationPolicyType",
                [{"AttributeName": "Reference-Security-Policy", "AttributeValue": name}],
            )
            for name in CLASSIC_SSL_POLICIES
        ]
        if not policy_names:
            return samples
        found = [p for p in samples if p.policy_name in policy_names]
        if len(found) != len(set(policy_names)):
            raise PolicyNotFoundError()
        return found

    def delete_load_balancer_listeners(self: Any, name: str, ports: list[str]) -> Any:
        balancer = self.get_load_balancer(name)
        if balancer:
            gone = {int(port) for port in ports}
            balancer.listeners = [
                lst for lst in balancer.listeners if int(lst.load_balancer_port) not in gone
            ]
        return balancer

    backend_cls.create_load_balancer = create_load_balancer
    backend_cls.create_load_balancer_listeners = create_load_balancer_listeners
    backend_cls.delete_load_balancer_listeners = delete_load_balancer_listeners
    backend_cls.describe_load_balancer_policies = describe_load_balancer_policies


class _Zone:
    """An NLB zone as AWS describes it: subnet, zone name and the addresses mapped to it."""

    def __init__(self, subnet: Any, mapping: dict[str, Any], address: Any) -> None:
        self.subnet_id = subnet.id
        self.zone_name = subnet.availability_zone
        entry: dict[str, str] = {}
        if address is not None:
            entry = {"IpAddress": address.public_ip, "AllocationId": address.allocation_id}
        if mapping.get("PrivateIPv4Address"):
            entry["PrivateIPv4Address"] = str(mapping["PrivateIPv4Address"])
        self.load_balancer_addresses = [entry] if entry else []


def _patch_nlb() -> None:
    backend_cls: Any = elbv2_models.ELBv2Backend
    balancer_cls: Any = elbv2_models.FakeLoadBalancer
    create = backend_cls.create_load_balancer

    def create_load_balancer(self: Any, *args: Any, **kwargs: Any) -> Any:
        mappings = list(kwargs.get("subnet_mappings") or [])
        allocations = [str(m["AllocationId"]) for m in mappings if m.get("AllocationId")]
        addresses: dict[str, Any] = {}
        if allocations:
            ec2 = ec2_backends[self.account_id][self.region_name]
            addresses = {str(a.allocation_id): a for a in ec2.describe_addresses()}
            unknown = sorted(set(allocations) - set(addresses))
            if unknown:
                raise ELBClientError(
                    "AllocationIdNotFound", f"The specified allocation ID '{unknown[0]}' not found"
                )
        balancer = create(self, *args, **kwargs)
        balancer._subnet_mappings = {
            str(m["SubnetId"]): (m, addresses.get(str(m.get("AllocationId") or "")))
            for m in mappings
        }
        return balancer

    def availability_zones(self: Any) -> list[Any]:
        mappings = getattr(self, "_subnet_mappings", {})
        zones: list[Any] = []
        for subnet in self.subnets:
            mapping, address = mappings.get(subnet.id, ({}, None))
            zones.append(_Zone(subnet, mapping, address))
        return zones

    modify = backend_cls.modify_listener
    extra = ("TLS", "UDP", "TCP_UDP")

    def modify_listener(
        self: Any,
        arn: str,
        port: str | None = None,
        protocol: str | None = None,
        ssl_policy: str | None = None,
        certificates: list[dict[str, Any]] | None = None,
        actions: list[dict[str, Any]] | None = None,
    ) -> Any:
        listener = modify(
            self,
            arn,
            port,
            None if protocol in extra else protocol,
            ssl_policy,
            certificates if protocol not in extra else [],
            actions,
        )
        if protocol == "TLS":
            if certificates:
                default = str(certificates[0]["CertificateArn"])
                if not self._certificate_exists(certificate_arn=default):
                    raise ELBClientError("CertificateNotFound", f"Certificate {default} not found")
                listener.certificate = default
                listener.certificates = [str(c["CertificateArn"]) for c in certificates]
            elif not listener.certificates:
                raise ELBClientError(
                    "InvalidConfigurationRequest",
                    "You must provide a list containing exactly one certificate if the listener "
                    "protocol is TLS.",
                )
        if protocol in extra:
            listener.protocol = protocol
        if listener.protocol not in ("TLS", "HTTPS"):
            listener.certificate = None
            listener.certificates = []
            listener.ssl_policy = None
        return listener

    backend_cls.create_load_balancer = create_load_balancer
    backend_cls.modify_listener = modify_listener
    balancer_cls.availability_zones = property(availability_zones)


def _patch_subnets() -> None:
    subnet_cls: Any = subnet_models.Subnet

    def ipv6_cidr_block_association_set(self: Any) -> list[dict[str, Any]]:
        return [
            {
                "ipv6CidrBlock": association["ipv6CidrBlock"],
                "associationId": association["associationId"],
                "ipv6CidrBlockState": {
                    "state": association["ipv6CidrBlockState"]["State"],
                },
            }
            for association in self.ipv6_cidr_block_associations.values()
            if association["ipv6CidrBlockState"]["State"] == "associated"
        ]

    subnet_cls.ipv6_cidr_block_association_set = property(ipv6_cidr_block_association_set)


def _patch_tags() -> None:
    resource_cls: Any = ec2_core_models.TaggedEC2Resource

    def get_tags(self: Any) -> list[dict[str, str]]:
        if not self.id:
            return []
        tags = self.ec2_backend.tags.get(self.id, {})
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(self.id), "")
        return [
            {"resource_id": self.id, "key": key, "value": value, "resource_type": kind}
            for key, value in tags.items()
        ]

    resource_cls.get_tags = get_tags


#: The admin path of the EC2 instance lifecycle (served by this process, not by moto).
LIFECYCLE_PATH = "/_cloudloop/moto/ec2-lifecycle"
#: Seconds a new instance stays ``pending``, a terminated one ``shutting-down`` and a new volume
#: ``creating``.
LIFECYCLE: dict[str, float] = {"pending_s": 0.0, "shutting_down_s": 0.0, "volume_creating_s": 0.0}
_lifecycle_lock = threading.RLock()


def _patch_lifecycle() -> None:
    """Instance states through a property: transitions fall due when the state is read."""
    instance_cls: Any = instance_models.Instance
    init = instance_cls.__init__
    terminate = instance_cls.terminate

    def state_get(self: Any) -> Any:
        due = self.__dict__.get("_cloudloop_due")
        if due is not None and time.monotonic() >= due[0]:
            with _lifecycle_lock:
                due = self.__dict__.pop("_cloudloop_due", None)
                if due is not None:
                    due[1](self)
        return self.__dict__["_cloudloop_state"]

    def state_set(self: Any, value: Any) -> None:
        self.__dict__["_cloudloop_state"] = value

    def run(self: Any) -> None:
        state = self.__dict__["_cloudloop_state"]
        state.name, state.code = "running", 16

    def finish_termination(self: Any) -> None:
        terminate(self)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        pending = LIFECYCLE["pending_s"]
        if pending > 0:
            state = self.__dict__["_cloudloop_state"]
            state.name, state.code = "pending", 0
            self.__dict__["_cloudloop_due"] = (time.monotonic() + pending, run)

    def terminate_later(self: Any) -> Any:
        delay = LIFECYCLE["shutting_down_s"]
        current = self._state  # settles a due transition first
        if current.name == "shutting-down":
            return copy_state(current)
        self.__dict__.pop("_cloudloop_due", None)  # a pending instance never comes up now
        if delay <= 0 or current.name == "terminated":
            return terminate(self)
        previous = copy_state(current)
        current.name, current.code = "shutting-down", 32
        self.__dict__["_cloudloop_due"] = (time.monotonic() + delay, finish_termination)
        return previous

    instance_cls._state = property(state_get, state_set)
    instance_cls.__init__ = __init__
    instance_cls.terminate = terminate_later


def copy_state(state: Any) -> Any:
    return instance_models.InstanceState(state.name, state.code)


def settle_instances() -> None:
    """Let every due transition happen (before volumes are listed: a terminated instance's
    volumes go when it is terminated)."""
    for regions in ec2_backends.values():
        for backend in regions.values():
            for reservation in list(backend.reservations.values()):
                for instance in list(reservation.instances):
                    _ = instance._state


def _patch_volume_listing() -> None:
    from moto.ec2.models import elastic_block_store as ebs_models

    backend_cls: Any = ebs_models.EBSBackend
    describe = backend_cls.describe_volumes

    def describe_volumes(self: Any, *args: Any, **kwargs: Any) -> Any:
        settle_instances()
        return describe(self, *args, **kwargs)

    backend_cls.describe_volumes = describe_volumes


def _patch_volume_creation() -> None:
    """A new volume is ``creating`` for the lifecycle's ``volume_creating_s``."""
    from moto.ec2.models import elastic_block_store as ebs_models

    volume_cls: Any = ebs_models.Volume
    init = volume_cls.__init__
    status = volume_cls.status

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        creating = LIFECYCLE["volume_creating_s"]
        if creating > 0:
            self.__dict__["_cloudloop_available_at"] = time.monotonic() + creating

    def status_get(self: Any) -> str:
        due = self.__dict__.get("_cloudloop_available_at")
        if due is not None and time.monotonic() < due:
            return "creating"
        return str(status.fget(self))

    volume_cls.__init__ = __init__
    volume_cls.status = property(status_get)


def _validate_launches() -> None:
    """AWS refuses an unknown image, instance type or interface security group."""
    settings: Any = moto_settings
    settings.ENABLE_AMI_VALIDATION = True
    settings.EC2_ENABLE_INSTANCE_TYPE_VALIDATION = True
    backend_cls: Any = instance_models.InstanceBackend
    run = backend_cls.run_instances

    def run_instances(self: Any, *args: Any, **kwargs: Any) -> Any:
        for nic in kwargs.get("nics") or []:
            for group_id in nic.get("Groups") or []:
                if self.get_security_group_from_id(group_id) is None:
                    raise InvalidSecurityGroupNotFoundError(group_id)
        return run(self, *args, **kwargs)

    backend_cls.run_instances = run_instances


def _image_lookup_by_key() -> None:
    """Each launched instance looks its image up with one ``image-id`` filter, which moto
    matches (``fnmatch``) against every image it holds, ~1,300 default AMIs: about half of a
    launch's CPU, 5,000 instances ≈ 50 CPU seconds. A filter of one literal ID (no wildcard) is
    a key lookup here, with the same answer (the image, or none); anything else goes to moto."""
    backend_cls: Any = ami_models.AmiBackend
    describe = backend_cls.describe_images

    def describe_images(
        self: Any,
        ami_ids: list[str] | None = None,
        filters: dict[str, Any] | None = None,
        exec_users: list[str] | None = None,
        owners: list[str] | None = None,
    ) -> Any:
        if not ami_ids and not exec_users and not owners and filters and len(filters) == 1:
            value = filters.get("image-id")
            if isinstance(value, list) and len(value) == 1:
                value = value[0]
            if isinstance(value, str) and not any(c in value for c in "*?["):
                image = self.amis.get(value)
                return [image] if image is not None else []
        return describe(self, ami_ids, filters, exec_users, owners)

    backend_cls.describe_images = describe_images


def install() -> None:
    """Patch moto's ELB, subnet and EC2 tag and instance models (once per process)."""
    if getattr(elb_models, _PATCHED, False):
        return
    _patch_classic()
    _patch_nlb()
    _patch_subnets()
    _patch_tags()
    _patch_lifecycle()
    _patch_volume_listing()
    _patch_volume_creation()
    _validate_launches()
    _image_lookup_by_key()
    setattr(elb_models, _PATCHED, True)


def _with_lifecycle_admin(app_cls: Any) -> Any:
    """moto's WSGI application, answering :data:`LIFECYCLE_PATH` itself."""

    class Application(app_cls):  # type: ignore[misc]
        def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
            if environ.get("PATH_INFO") != LIFECYCLE_PATH:
                return super().__call__(environ, start_response)
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            wanted = json.loads(body or b"{}")
            with _lifecycle_lock:
                for key in LIFECYCLE:
                    LIFECYCLE[key] = float(wanted.get(key, 0.0))
                payload = json.dumps(LIFECYCLE).encode()
            start_response(
                "200 OK",
                [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))],
            )
            return [payload]

    return Application


def main(argv: list[str] | None = None) -> None:
    install()
    import moto.server
    from moto.server import main as moto_main

    server: Any = moto.server
    server.DomainDispatcherApplication = _with_lifecycle_admin(server.DomainDispatcherApplication)
    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
