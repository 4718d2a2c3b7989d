"""The CSI Identity service, served by both the controller and the node plugin.

``GetPluginInfo`` names the driver (``csi.driver_name``) and cloudloop's version;
``GetPluginCapabilities`` describes the whole plugin (controller service, accessibility
constraints for zonal clouds, online expansion), the same on both sides, as the sidecars and
csi-sanity expect; ``Probe`` asks the process's own readiness check (the controller: Temporal
answers) and says not ready (``ready=false``) rather than failing while it does not pass.
The chart's livenessprobe sidecar turns a Probe that fails, says not ready or does not answer
within its timeout into a 500 on /healthz, and the kubelet restarts the controller after several:
a hung controller, or one that has lost Temporal for that long, starts afresh.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Awaitable, Callable

from google.protobuf import wrappers_pb2
from grpc import aio

from cloudloop.csi.spec import Features
from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc

log = logging.getLogger(__name__)

Context = aio.ServicerContext[object, object]


def version() -> str:
    try:
        return importlib.metadata.version("cloudloop")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


async def always_ready() -> bool:
    return True


class Identity(csi_pb2_grpc.IdentityServicer):
    def __init__(
        self,
        driver_name: str,
        features: Features,
        *,
        provider: str,
        ready: Callable[[], Awaitable[bool]] = always_ready,
    ) -> None:
        self.driver_name = driver_name
        self.features = features
        self.provider = provider
        self.ready = ready

    async def GetPluginInfo(
        self, request: csi_pb2.GetPluginInfoRequest, context: Context
    ) -> csi_pb2.GetPluginInfoResponse:
        return csi_pb2.GetPluginInfoResponse(
            name=self.driver_name, vendor_version=version(), manifest={"cloud": self.provider}
        )

    async def GetPluginCapabilities(
        self, request: csi_pb2.GetPluginCapabilitiesRequest, context: Context
    ) -> csi_pb2.GetPluginCapabilitiesResponse:
        return csi_pb2.GetPluginCapabilitiesResponse(
            capabilities=self.features.plugin_capabilities()
        )

    async def Probe(self, request: csi_pb2.ProbeRequest, context: Context) -> csi_pb2.ProbeResponse:
        try:
            ready = await self.ready()
        except Exception as exc:  # a probe answers; it never fails the RPC for a dependency
            log.warning("csi probe: not ready: %s", exc)
            ready = False
        return csi_pb2.ProbeResponse(ready=wrappers_pb2.BoolValue(value=ready))
