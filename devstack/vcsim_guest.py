"""VMware Tools for vcsim's VMs: a powered-on cloud-init guest reports its IP and host name.

vcsim runs no guests, so a VM a machine driver cloned and powered on never reports an address
and its Cluster API machine never gets ``provisioned``. :class:`GuestAgent` plays the guest's
VMware Tools: every ``interval_s`` it reads the VMs (one property-collector retrieval) and gives
each powered-on VM that carries cloud-init's ``guestinfo.metadata`` but reports no IP yet an
address from ``network`` and the metadata's ``local-hostname`` as ``guest.hostName``, once it has
been seen powered on for ``boot_s`` (the guest's boot).

Rules:
- Only VMs with ``guestinfo.metadata`` (made through the VMware cloud-init datasource, as the
  machine drivers make them) are touched; the stack's seeded VMs are left alone.
- The report goes through vcsim's ``SET.guest.*`` extraConfig hook (simulator-only), the same
  way a real guest's Tools update ``guest.ipAddress``: the driver under test only reads.
- Failures (a VM destroyed meanwhile, a reconfigure racing a power-off) are ignored: a report
  not visible after ``retry_s`` is sent again.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import logging
import threading
import time
from types import TracebackType
from typing import Any

from cloudloop.cloud.vsphere.vmomi import PC, vim
from devstack.vcsim import VcsimEndpoint
from devstack.vcsim_inventory import connect, disconnect

log = logging.getLogger(__name__)

_PATHS = ["name", "runtime.powerState", "guest.ipAddress", "config.extraConfig"]


def _host_name(options: dict[str, str], default: str) -> str:
    raw = options.get("guestinfo.metadata", "")
    if options.get("guestinfo.metadata.encoding") in ("base64", "b64"):
        with contextlib.suppress(ValueError):
            raw = base64.b64decode(raw).decode()
    try:
        data = json.loads(raw)
    except ValueError:
        return default
    return str(data.get("local-hostname") or default) if isinstance(data, dict) else default


class GuestAgent:
    """A thread reporting guest addresses for powered-on cloud-init VMs (see the module)."""

    def __init__(
        self,
        endpoint: VcsimEndpoint,
        network: str = "10.77.0.0/16",
        interval_s: float = 0.2,
        boot_s: float = 0.0,
        retry_s: float = 5.0,
    ) -> None:
        self.endpoint = endpoint
        self.interval_s, self.boot_s, self.retry_s = interval_s, boot_s, retry_s
        self._on_since: dict[str, float] = {}  # VM moref → when first seen powered on
        self._sent: dict[str, float] = {}  # VM moref → when its report was sent
        self._hosts = ipaddress.ip_network(network).hosts()
        self._given: dict[str, str] = {}  # VM moref → IP
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vcsim-guest", daemon=True)

    def __enter__(self) -> GuestAgent:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        si: Any = None
        while not self._stop.wait(self.interval_s):
            try:
                if si is None:
                    si = connect(self.endpoint)
                self.tick(si)
            except Exception:  # vcsim restarting or a VM going: try again next pass
                log.debug("vcsim guest agent pass failed", exc_info=True)
                si = None
        if si is not None:
            with contextlib.suppress(Exception):
                disconnect(si)

    def tick(self, si: Any) -> int:
        """One pass; the number of VMs that got an address."""
        view = si.content.viewManager.CreateContainerView(
            si.content.rootFolder, [vim.VirtualMachine], True
        )
        try:
            spec = PC.FilterSpec(
                objectSet=[
                    PC.ObjectSpec(
                        obj=view,
                        skip=True,
                        selectSet=[
                            PC.TraversalSpec(path="view", skip=False, type=vim.view.ContainerView)
                        ],
                    )
                ],
                propSet=[PC.PropertySpec(type=vim.VirtualMachine, pathSet=_PATHS)],
            )
            found = si.content.propertyCollector.RetrieveContents([spec])
        finally:
            view.Destroy()
        reported = 0
        now = time.monotonic()
        for obj in found:
            props = {p.name: p.val for p in obj.propSet}
            moref = str(obj.obj._moId)
            if props.get("runtime.powerState") != "poweredOn":
                self._on_since.pop(moref, None)
                continue
            if props.get("guest.ipAddress"):
                continue
            options = {o.key: str(o.value) for o in props.get("config.extraConfig") or []}
            if "guestinfo.metadata" not in options:
                continue
            if now - self._on_since.setdefault(moref, now) < self.boot_s:
                continue  # still booting
            if now - self._sent.get(moref, -self.retry_s) < self.retry_s:
                continue  # sent; vcsim applies it when its reconfigure task runs
            self._sent[moref] = now
            ip = self._given.get(moref) or str(next(self._hosts))
            self._given[moref] = ip
            host = _host_name(options, str(props.get("name", "")))
            config = vim.vm.ConfigSpec(
                extraConfig=[
                    vim.option.OptionValue(key="SET.guest.ipAddress", value=ip),
                    vim.option.OptionValue(key="SET.guest.hostName", value=host),
                ]
            )
            with contextlib.suppress(Exception):
                obj.obj.ReconfigVM_Task(spec=config)
                reported += 1
        return reported
