"""The node manager's registration Secret for vSphere (Deckhouse ``templates/registration.yaml``).

``kube-system/d8-node-manager-cloud-provider`` and its copy ``...-vsphere`` tell the node manager
the region, zones, the InstanceClass and Cluster API kinds (CAPV's ``VSphereCluster`` and
``VSphereMachineTemplate``) and hand it the vCenter connection and the instance defaults the
machine template reads (the ``vsphere`` key holds the password: it is a Secret, but it is never
logged). Every value is base64.

Rules: the values are rendered from the settings only (no vCenter call), so a vCenter outage
never blanks the Secret; zones are the configured ``zones`` (discovery publishes the live ones).
The ``vsphere`` subtree has Deckhouse's keys (``server``, ``instances.mainNetwork``,
``instanceClassDefaults``, ``zoneComputeClusterPaths``, ``datacenter``...); ``host`` and a top-level
``disableTimesync`` stay for readers of cloudloop's earlier Secret. No MCM: ``machineClassKind``
is empty, so the node manager picks the Cluster API engine.
"""

from __future__ import annotations

import contextlib

from cloudloop.cloud import registration
from cloudloop.cloud.capi import INFRA_GROUP
from cloudloop.cloud.registration import encoded, helm_json
from cloudloop.cloud.vsphere.capi import INFRA_KINDS as VSPHERE
from cloudloop.cloud.vsphere.config import ConfigError
from cloudloop.cloud.vsphere.mapping import PROVIDER
from cloudloop.cloud.vsphere.settings import (
    DEFAULT_REGION_CATEGORY,
    DEFAULT_ZONE_CATEGORY,
    VsphereSettings,
    resolve,
)
from cloudloop.kube.bodies import Secret


def registration_values(settings: VsphereSettings) -> dict[str, str]:
    """The Secret's ``data`` (base64 values)."""
    try:
        conn = resolve(settings)
        username, password = conn.credentials()
        host = conn.host if conn.port == 443 else f"{conn.host}:{conn.port}"
        insecure, region_category, zone_category = (
            conn.insecure,
            conn.region_category,
            conn.zone_category,
        )
    except (ConfigError, OSError):  # not configured (yet): publish what the settings say
        host, username = settings.server, settings.username
        password = settings.password.get_secret_value() if settings.password else ""
        insecure = settings.insecure
        region_category = settings.region_tag_category or DEFAULT_REGION_CATEGORY
        zone_category = settings.zone_tag_category or DEFAULT_ZONE_CATEGORY
    defaults = settings.instance_class_defaults
    vsphere = {
        "server": host,
        "host": host,
        "username": username,
        "password": password,
        "insecure": insecure,
        "regionTagCategory": region_category,
        "zoneTagCategory": zone_category,
        "region": settings.region,
        "vmFolderPath": settings.vm_folder_path,
        "sshKey": settings.ssh_public_key,
        "disableTimesync": defaults.disable_timesync,
        "datacenter": settings.datacenter,
        "instances": {"mainNetwork": settings.main_network},
        "instanceClassDefaults": {
            "template": defaults.template,
            "datastore": defaults.datastore,
            "resourcePoolPath": defaults.resource_pool_path,
            "disableTimesync": defaults.disable_timesync,
        },
        "zoneComputeClusterPaths": dict(settings.zone_compute_cluster_paths),
    }
    if settings.ca_bundle is not None:
        with contextlib.suppress(OSError):  # unreadable now: published at the next write
            vsphere["caBundle"] = settings.ca_bundle.read_text()
    infra_api_version = f"{INFRA_GROUP}/{VSPHERE.machine.version}"
    values = {
        "type": PROVIDER,
        "region": settings.region,
        "zones": helm_json(list(settings.zones)),
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "VsphereInstanceClass",
        "machineClassKind": "",
        "capiClusterKind": VSPHERE.cluster.kind,
        "capiClusterAPIVersion": infra_api_version,
        "capiClusterName": PROVIDER,
        "capiMachineTemplateKind": VSPHERE.template.kind,
        "capiMachineTemplateAPIVersion": infra_api_version,
        "sshPublicKey": settings.ssh_public_key,
        "vsphere": helm_json(vsphere),
    }
    return encoded(values)


def registration_secrets(settings: VsphereSettings) -> list[Secret]:
    """Both Secrets (the generic name and the ``-vsphere`` copy) with Deckhouse's labels."""
    return registration.registration_secrets(PROVIDER, registration_values(settings))
