"""XML as the oVirt Engine API writes and reads it (``application/xml``, API version 4).

Element names follow the public API model (``vm``, ``disk_attachment``, ``reported_device``...);
references are empty elements with ``id`` and ``href``; ``follow`` inlines linked collections.
"""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import Any

from devstack.ovirt_emulator.engine import (
    ApiFault,
    Cluster,
    DataCenter,
    Disk,
    DiskAttachment,
    Engine,
    Nic,
    ReportedDevice,
    StorageDomain,
    Template,
    Vm,
    VnicProfile,
    seed_id,
)

API_PREFIX = "/ovirt-engine/api"
PRODUCT_VERSION = (4, 5, 5)


def _text(parent: ET.Element, tag: str, value: object) -> ET.Element | None:
    if value is None:
        return None
    child = ET.SubElement(parent, tag)
    if isinstance(value, bool):
        child.text = "true" if value else "false"
    else:
        child.text = str(value)
    return child


def _ref(parent: ET.Element, tag: str, collection: str, ref_id: str | None) -> None:
    if ref_id is not None:
        ET.SubElement(parent, tag, {"href": f"{API_PREFIX}/{collection}/{ref_id}", "id": ref_id})


def _entity(tag: str, href: str, entity_id: str) -> ET.Element:
    return ET.Element(tag, {"href": f"{API_PREFIX}/{href}", "id": entity_id})


def _links(element: ET.Element, href: str, rels: Iterable[str], followed: set[str]) -> None:
    for rel in rels:
        if rel.replace("_", "") not in followed:
            ET.SubElement(element, "link", {"href": f"{API_PREFIX}/{href}/{rel}", "rel": rel})


def _date(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def to_bytes(element: ET.Element) -> bytes:
    return b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n' + ET.tostring(element)


def collection(tag: str, items: Iterable[ET.Element]) -> ET.Element:
    root = ET.Element(tag)
    root.extend(items)
    return root


# -- entities ---------------------------------------------------------------------------------
def api_root(engine: Engine, username: str) -> ET.Element:
    root = ET.Element("api")
    for rel in (
        "clusters",
        "datacenters",
        "disks",
        "networks",
        "storagedomains",
        "templates",
        "vms",
        "vnicprofiles",
    ):
        ET.SubElement(root, "link", {"href": f"{API_PREFIX}/{rel}", "rel": rel})
    info = ET.SubElement(root, "product_info")
    _text(info, "instance_id", seed_id("engine", "instance"))
    _text(info, "name", "oVirt Engine")
    _text(info, "vendor", "ovirt.org")
    version = ET.SubElement(info, "version")
    major, minor, build = PRODUCT_VERSION
    _text(version, "build", build)
    _text(version, "full_version", f"{major}.{minor}.{build}-emulator")
    _text(version, "major", major)
    _text(version, "minor", minor)
    _text(version, "revision", 0)
    special = ET.SubElement(root, "special_objects")
    _ref(special, "blank_template", "templates", "00000000-0000-0000-0000-000000000000")
    summary = ET.SubElement(root, "summary")
    vms = ET.SubElement(summary, "vms")
    _text(vms, "active", sum(1 for vm in engine.vms.values() if vm.status == "up"))
    _text(vms, "total", len(engine.vms))
    storage = ET.SubElement(summary, "storage_domains")
    _text(storage, "active", len(engine.storage_domains))
    _text(storage, "total", len(engine.storage_domains))
    _text(root, "time", _date(datetime.datetime.now(tz=datetime.UTC).timestamp()))
    user = ET.SubElement(root, "authenticated_user", {"id": "admin-user-id"})
    _text(user, "user_name", username)
    return root


def vm(engine: Engine, item: Vm, followed: set[str]) -> ET.Element:
    element = _entity("vm", f"vms/{item.id}", item.id)
    _text(element, "name", item.name)
    _text(element, "description", item.description)
    _text(element, "comment", item.comment)
    _links(element, f"vms/{item.id}", ("diskattachments", "nics", "reporteddevices"), followed)
    cpu = ET.SubElement(element, "cpu")
    _text(cpu, "architecture", "x86_64")
    topology = ET.SubElement(cpu, "topology")
    _text(topology, "cores", item.cores)
    _text(topology, "sockets", item.sockets)
    _text(topology, "threads", item.threads)
    _text(element, "creation_time", _date(item.creation_time))
    _text(element, "delete_protected", False)
    _text(element, "fqdn", engine.fqdn(item))
    _text(element, "memory", item.memory)
    if item.memory_guaranteed is not None or item.memory_max is not None:
        policy = ET.SubElement(element, "memory_policy")
        _text(policy, "ballooning", item.ballooning)
        _text(policy, "guaranteed", item.memory_guaranteed)
        _text(policy, "max", item.memory_max)
    os_element = ET.SubElement(element, "os")
    _text(os_element, "type", "other_linux")
    _text(element, "origin", "ovirt")
    _text(element, "start_time", _date(item.start_time))
    _text(element, "stateless", False)
    _text(element, "status", item.status)
    _text(element, "stop_time", _date(item.stop_time))
    _text(element, "type", item.vm_type)
    _ref(element, "cluster", "clusters", item.cluster_id)
    _ref(element, "original_template", "templates", item.template_id)
    _ref(element, "template", "templates", item.template_id)
    if "diskattachments" in followed:
        element.append(
            collection(
                "disk_attachments",
                (
                    disk_attachment(engine, a)
                    for a in sorted(
                        engine.attachments_of(item.id), key=lambda a: (not a.bootable, a.disk_id)
                    )
                ),
            )
        )
    if "nics" in followed:
        element.append(collection("nics", (nic(n) for n in engine.nics_of(item.id))))
    if "reporteddevices" in followed:
        element.append(
            collection(
                "reported_devices",
                (reported_device(item.id, d) for d in engine.devices_of(item)),
            )
        )
    return element


def disk_attachment(engine: Engine, item: DiskAttachment) -> ET.Element:
    element = _entity(
        "disk_attachment", f"vms/{item.vm_id}/diskattachments/{item.disk_id}", item.disk_id
    )
    _text(element, "active", item.active)
    _text(element, "bootable", item.bootable)
    _text(element, "interface", item.interface)
    _text(element, "pass_discard", False)
    _text(element, "read_only", False)
    _text(element, "uses_scsi_reservation", False)
    _ref(element, "disk", "disks", item.disk_id)
    _ref(element, "vm", "vms", item.vm_id)
    return element


def disk(engine: Engine, item: Disk) -> ET.Element:
    element = _entity("disk", f"disks/{item.id}", item.id)
    _text(element, "name", item.name)
    _text(element, "actual_size", item.actual_size)
    _text(element, "alias", item.name)
    _text(element, "content_type", "data")
    if item.description:
        _text(element, "description", item.description)
    _text(element, "format", item.format)
    _text(element, "image_id", item.id)
    _text(element, "propagate_errors", False)
    _text(element, "provisioned_size", item.provisioned_size)
    _text(element, "shareable", False)
    _text(element, "sparse", item.sparse)
    _text(element, "status", item.status)
    _text(element, "storage_type", "image")
    _text(element, "total_size", item.actual_size)
    _text(element, "wipe_after_delete", False)
    domains = ET.SubElement(element, "storage_domains")
    _ref(domains, "storage_domain", "storagedomains", item.storage_domain_id)
    return element


def nic(item: Nic) -> ET.Element:
    element = _entity("nic", f"vms/{item.vm_id}/nics/{item.id}", item.id)
    _text(element, "name", item.name)
    _text(element, "interface", item.interface)
    _text(element, "linked", True)
    mac = ET.SubElement(element, "mac")
    _text(mac, "address", item.mac)
    _text(element, "plugged", True)
    _text(element, "synced", True)
    _ref(element, "vm", "vms", item.vm_id)
    _ref(element, "vnic_profile", "vnicprofiles", item.vnic_profile_id)
    return element


def reported_device(vm_id: str, item: ReportedDevice) -> ET.Element:
    element = _entity("reported_device", f"vms/{vm_id}/reporteddevices/{item.id}", item.id)
    _text(element, "name", item.name)
    _text(element, "description", "guest reported data")
    ips = ET.SubElement(element, "ips")
    for address in item.ips:
        ip = ET.SubElement(ips, "ip")
        _text(ip, "address", address.address)
        _text(ip, "version", address.version)
    mac = ET.SubElement(element, "mac")
    _text(mac, "address", item.mac)
    _text(element, "type", "network")
    _ref(element, "vm", "vms", vm_id)
    return element


def template(item: Template) -> ET.Element:
    element = _entity("template", f"templates/{item.id}", item.id)
    _text(element, "name", item.name)
    _text(element, "description", item.description)
    cpu = ET.SubElement(element, "cpu")
    topology = ET.SubElement(cpu, "topology")
    _text(topology, "cores", item.cores)
    _text(topology, "sockets", item.sockets)
    _text(topology, "threads", item.threads)
    _text(element, "memory", item.memory)
    _text(element, "status", "ok")
    _text(element, "type", "server")
    version = ET.SubElement(element, "version")
    _text(version, "version_name", "base version")
    _text(version, "version_number", item.version_number)
    _ref(element, "cluster", "clusters", item.cluster_id)
    return element


def cluster(item: Cluster) -> ET.Element:
    element = _entity("cluster", f"clusters/{item.id}", item.id)
    _text(element, "name", item.name)
    cpu = ET.SubElement(element, "cpu")
    _text(cpu, "architecture", "x86_64")
    _text(cpu, "type", "Intel Nehalem Family")
    version = ET.SubElement(element, "version")
    _text(version, "major", PRODUCT_VERSION[0])
    _text(version, "minor", 7)
    _ref(element, "data_center", "datacenters", item.data_center_id)
    return element


def data_center(item: DataCenter) -> ET.Element:
    element = _entity("data_center", f"datacenters/{item.id}", item.id)
    _text(element, "name", item.name)
    _text(element, "local", False)
    _text(element, "status", "up")
    return element


def storage_domain(item: StorageDomain) -> ET.Element:
    element = _entity("storage_domain", f"storagedomains/{item.id}", item.id)
    _text(element, "name", item.name)
    _text(element, "available", item.available)
    _text(element, "committed", item.used)
    _text(element, "external_status", item.external_status)
    _text(element, "master", item.name == "data-fast")
    _text(element, "status", item.status)
    storage = ET.SubElement(element, "storage")
    _text(storage, "type", "nfs")
    _text(element, "storage_format", "v5")
    _text(element, "type", item.type)
    _text(element, "used", item.used)
    return element


def vnic_profile(item: VnicProfile) -> ET.Element:
    element = _entity("vnic_profile", f"vnicprofiles/{item.id}", item.id)
    _text(element, "name", item.name)
    _text(element, "pass_through", None)
    _ref(element, "network", "networks", item.network_id)
    return element


def action(extra: dict[str, Any] | None = None) -> ET.Element:
    element = ET.Element("action")
    _text(element, "status", "complete")
    for key, value in (extra or {}).items():
        _text(element, key, value)
    return element


def fault(error: ApiFault) -> ET.Element:
    element = ET.Element("fault")
    _text(element, "detail", error.detail)
    _text(element, "reason", error.reason)
    return element


# -- request bodies ---------------------------------------------------------------------------
def parse(body: bytes, expected: str) -> ET.Element:
    """The request body's root element, which must be ``expected`` (``vm``, ``action``...)."""
    if not body.strip():
        if expected == "action":
            return ET.Element("action")
        raise ApiFault(400, f"Request body missing: <{expected}> expected", "Bad Request")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise ApiFault(400, f"Malformed XML: {exc}", "Bad Request") from exc
    if root.tag != expected:
        raise ApiFault(400, f"<{expected}> expected, got <{root.tag}>", "Bad Request")
    return root


def text_of(element: ET.Element | None, path: str) -> str | None:
    if element is None:
        return None
    found = element.find(path)
    return found.text if found is not None and found.text is not None else None


def int_of(element: ET.Element | None, path: str) -> int | None:
    value = text_of(element, path)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ApiFault(400, f"{path} is not an integer: {value!r}", "Bad Request") from exc


def bool_of(element: ET.Element | None, path: str) -> bool | None:
    value = text_of(element, path)
    if value is None:
        return None
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise ApiFault(400, f"{path} is not a boolean: {value!r}", "Bad Request")


def ref_of(element: ET.Element | None, path: str) -> tuple[str | None, str | None]:
    """``(id, name)`` of a reference such as ``<cluster id="..."/>`` or ``<template><name>``."""
    if element is None:
        return None, None
    found = element.find(path)
    if found is None:
        return None, None
    return found.get("id"), text_of(found, "name")
