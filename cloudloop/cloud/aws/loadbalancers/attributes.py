"""Load-balancer and target-group attributes a Service asks for, and which of them differ from
what the cloud has: pure functions, shared by the ensure and by the drift check.

Classic (upstream's ``LoadBalancerAttributes``): access log, connection draining, idle timeout and
cross-zone balancing are always set, unset annotations meaning upstream's defaults (off, off,
60 s, off), so removing an annotation restores the default. NLB (upstream
``reconcileLBAttributes``): ``load_balancing.cross_zone.enabled`` and the access-log attributes;
the bucket and prefix are sent only with logging on (the API refuses an empty bucket). Target
groups get the attributes the annotations name; others keep their value, as upstream. Only the
fields the Service decides are compared, so AWS's own extras never look like a change. A
just-created resource is compared with the API's defaults, saving a describe call.
"""

from __future__ import annotations

from typing import Any

from cloudloop.cloud.aws.loadbalancers.service_annotations import (
    PRESERVE_CLIENT_IP,
    PROXY_PROTOCOL_V2,
    AwsLoadBalancerOptions,
)

#: What DescribeLoadBalancerAttributes shows for a Classic ELB created through the API.
CLASSIC_DEFAULTS: dict[str, dict[str, Any]] = {
    "CrossZoneLoadBalancing": {"Enabled": False},
    "AccessLog": {"Enabled": False},
    "ConnectionDraining": {"Enabled": False, "Timeout": 300},
    "ConnectionSettings": {"IdleTimeout": 60},
}
CROSS_ZONE = "load_balancing.cross_zone.enabled"
ACCESS_LOGS_ENABLED = "access_logs.s3.enabled"
ACCESS_LOGS_BUCKET = "access_logs.s3.bucket"
ACCESS_LOGS_PREFIX = "access_logs.s3.prefix"
#: What a new NLB has (only the attributes this driver sets).
NLB_DEFAULTS = {CROSS_ZONE: "false", ACCESS_LOGS_ENABLED: "false"}
#: What a new instance target group has (TCP, UDP or TLS).
TARGET_GROUP_DEFAULTS = {PROXY_PROTOCOL_V2: "false", PRESERVE_CLIENT_IP: "true"}


def classic_attributes(options: AwsLoadBalancerOptions) -> dict[str, dict[str, Any]]:
    """ModifyLoadBalancerAttributes' ``LoadBalancerAttributes`` for the Service."""
    access_log: dict[str, Any] = {"Enabled": options.access_log.enabled}
    if options.access_log.bucket:
        access_log["S3BucketName"] = options.access_log.bucket
    if options.access_log.prefix:
        access_log["S3BucketPrefix"] = options.access_log.prefix
    if options.access_log.emit_interval_min is not None:
        access_log["EmitInterval"] = options.access_log.emit_interval_min
    draining: dict[str, Any] = {"Enabled": options.classic.connection_draining}
    if options.classic.connection_draining_timeout_s is not None:
        draining["Timeout"] = options.classic.connection_draining_timeout_s
    return {
        "CrossZoneLoadBalancing": {"Enabled": options.cross_zone},
        "AccessLog": access_log,
        "ConnectionDraining": draining,
        "ConnectionSettings": {"IdleTimeout": options.classic.idle_timeout_s},
    }


def classic_attribute_changes(
    current: dict[str, Any], wanted: dict[str, dict[str, Any]]
) -> list[str]:
    """``Group.Field`` names that differ; the settings of a feature that is off do not count."""
    changed: list[str] = []
    for group, fields in wanted.items():
        have = current.get(group) or {}
        relevant = fields if fields.get("Enabled", True) else {"Enabled": False}
        for name, value in relevant.items():
            if have.get(name) != value:
                changed.append(f"{group}.{name}")
    return changed


def nlb_attributes(options: AwsLoadBalancerOptions) -> dict[str, str]:
    wanted = {
        CROSS_ZONE: str(options.cross_zone).lower(),
        ACCESS_LOGS_ENABLED: str(options.access_log.enabled).lower(),
    }
    if options.access_log.enabled:
        wanted[ACCESS_LOGS_BUCKET] = options.access_log.bucket
        wanted[ACCESS_LOGS_PREFIX] = options.access_log.prefix
    return wanted


def changed_attributes(
    current: dict[str, str], wanted: dict[str, str], defaults: dict[str, str]
) -> dict[str, str]:
    """The key=value attributes (NLB or target group) whose value must change; one the API does
    not list has its default value."""
    return {k: v for k, v in wanted.items() if current.get(k, defaults.get(k)) != v}


def as_dict(attributes: list[dict[str, Any]]) -> dict[str, str]:
    return {str(a["Key"]): str(a.get("Value", "")) for a in attributes}


def as_list(attributes: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(attributes.items())]
