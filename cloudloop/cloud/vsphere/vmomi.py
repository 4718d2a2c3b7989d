"""pyvmomi at one typed boundary: its dynamic type tree is ``Any`` here and nowhere else.

pyvmomi builds ``vim``/``vmodl`` types at run time and its partial stubs disagree with what
vCenter (and vcsim) accept, so the rest of the provider uses these names instead of importing
``pyVmomi`` directly.
"""

from __future__ import annotations

import http.client
import ssl
from typing import Any
from xml.etree import ElementTree

import pyVim.connect as _connect
import pyVmomi as _pyvmomi
import pyVmomi.SoapAdapter as _soap
from pyVmomi import VmomiSupport as _support
from pyVmomi import pbm as _pbm

vim: Any = _pyvmomi.vim
vmodl: Any = _pyvmomi.vmodl
pbm: Any = _pbm
SoapStubAdapter: Any = _soap.SoapStubAdapter
connect_at_version: Any = _connect.Connect
get_service_versions: Any = _support.GetServiceVersions
smart_connect: Any = _connect.SmartConnect  # the dev stack's seeding (vcsim, no timeout needed)
disconnect: Any = _connect.Disconnect

#: The property collector's types (FilterSpec, ObjectSpec, PropertySpec, TraversalSpec...).
PC: Any = vmodl.query.PropertyCollector


class VersionProbeError(OSError):
    """The server's API versions could not be read (it is down, or not a vCenter)."""


def supported_version(host: str, port: int, context: ssl.SSLContext, timeout_s: float) -> str:
    """The newest ``vim25`` version both pyVmomi and the server speak, read from
    ``/sdk/vimServiceVersions.xml`` with a timeout (``SmartConnect``'s own probe has none, so a
    vCenter that accepts the connection and never answers held a login forever)."""
    conn = http.client.HTTPSConnection(host, port=port, context=context, timeout=timeout_s)
    try:
        conn.request("GET", "/sdk/vimServiceVersions.xml")
        response = conn.getresponse()
        if response.status != 200:
            raise VersionProbeError(f"{host}:{port} answered {response.status} for its versions")
        root = ElementTree.fromstring(response.read())
    except ElementTree.ParseError as exc:
        raise VersionProbeError(f"{host}:{port} is not a VIM server: {exc}") from None
    finally:
        conn.close()
    known: set[str] = set()
    for namespace in root.findall("namespace"):
        known.update(v.text or "" for v in namespace.findall("version"))
        known.update(v.text or "" for v in namespace.findall("priorVersions/version"))
    for version in get_service_versions("vim25"):
        if _support.versionIdMap.get(version) in known:
            return str(version)
    raise VersionProbeError(f"{host}:{port} speaks no vim25 version pyVmomi knows")


def connect(
    host: str,
    port: int,
    user: str,
    password: str,
    *,
    context: ssl.SSLContext,
    thumbprint: str | None,
    timeout_s: float,
) -> Any:
    """``SmartConnect`` with every request bounded by ``timeout_s``: the version probe (ours,
    with a timeout) and the login (``Connect`` at that version)."""
    version = supported_version(host, port, context, timeout_s)
    return connect_at_version(
        host=host,
        port=port,
        user=user,
        pwd=password,
        service="hostd",
        adapter="SOAP",
        version=version,
        path="/sdk",
        thumbprint=thumbprint,
        sslContext=context,
        httpConnectionTimeout=timeout_s,
        connectionPoolTimeout=-1,
    )
