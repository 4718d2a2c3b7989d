"""The node manager's registration Secret for OpenStack (Deckhouse ``templates/registration.yaml``).

``kube-system/d8-node-manager-cloud-provider`` (and the copy ``...-openstack``) tells the node
manager to use ``OpenStackInstanceClass`` and the Cluster API kinds (``capi*`` keys:
``OpenStackCluster``/``OpenStackMachineTemplate`` v1beta1, cluster ``openstack``)
and hands it the connection (``openstack`` key: ``connection``, ``internalNetworkNames``,
``externalNetworkNames``, ``instances``, ``podNetworkMode``, ``tags``: the subtree the machine
template reads as ``.provider``), key for key as Deckhouse renders it. The ``openstack`` key
holds the password: it is a Secret, but it is never logged. Every value is base64.

Departure from Deckhouse's OpenStack module: ``machineClassKind`` is empty, as on the other four
clouds (cloudloop serves no Machine Controller Manager ``OpenStackMachineClass``; an empty kind
tells the node manager to use Cluster API).
"""

from __future__ import annotations

from typing import Any

from cloudloop.cloud import registration
from cloudloop.cloud.capi import INFRA_GROUP
from cloudloop.cloud.openstack.capi import INFRA_KINDS
from cloudloop.cloud.openstack.config import resolve
from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.cloud.registration import encoded, helm_json
from cloudloop.kube.bodies import Secret

NAME = "openstack"


def registration_values(raw: OpenStackSettings) -> dict[str, str]:
    """The Secret's ``data`` (base64 values)."""
    settings = resolve(raw)
    c = settings.connection
    connection: dict[str, Any] = {
        "authURL": c.auth_url,
        "username": c.username,
        "password": c.password_value(),
        "domainName": c.domain_name or c.user_domain_name,
        "region": c.region,
    }
    if c.tenant_id:
        connection["tenantID"] = c.tenant_id
    elif c.tenant_name:
        connection["tenantName"] = c.tenant_name
    if c.ca_file is not None and c.ca_file.exists():
        connection["caCert"] = c.ca_file.read_text()
    openstack: dict[str, Any] = {
        "connection": connection,
        "internalNetworkNames": list(settings.networking.internal_network_names),
        "podNetworkMode": settings.pod_network_mode,
    }
    if settings.networking.public_network_names:
        openstack["externalNetworkNames"] = list(settings.networking.public_network_names)
    if settings.instances:
        openstack["instances"] = dict(settings.instances)
    if settings.tags:
        openstack["tags"] = dict(settings.tags)
    infra_api_version = f"{INFRA_GROUP}/{INFRA_KINDS.machine.version}"
    values = {
        "type": NAME,
        "region": c.region,
        "zones": helm_json(list(settings.zones)),
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "OpenStackInstanceClass",
        "machineClassKind": "",  # no MCM: the node manager uses Cluster API
        "capiClusterName": NAME,
        "capiClusterKind": INFRA_KINDS.cluster.kind,
        "capiClusterAPIVersion": infra_api_version,
        "capiMachineTemplateKind": INFRA_KINDS.template.kind,
        "capiMachineTemplateAPIVersion": infra_api_version,
        "sshPublicKey": settings.ssh_public_key,
        "openstack": helm_json(openstack),
    }
    return encoded(values)


def registration_secrets(settings: OpenStackSettings) -> list[Secret]:
    """Both Secrets (the generic name and the ``-openstack`` copy) with Deckhouse's labels."""
    return registration.registration_secrets(NAME, registration_values(settings))
