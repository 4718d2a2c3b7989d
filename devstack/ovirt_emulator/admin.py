"""A test's handle on a running emulator: inspect its state, count requests, inject faults.

This talks to the emulator's admin port only; drivers never use it (they go through ``ovirtsdk4``).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any


class OvirtEmulatorAdmin:
    def __init__(self, admin_url: str, *, timeout_s: float = 10.0) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(
            f"{self.admin_url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read() or b"null")

    # -- inspection ------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("GET", "/state")
        return answer

    def vms(self) -> list[dict[str, Any]]:
        return list(self.state()["vms"])

    def vm(self, name: str) -> dict[str, Any] | None:
        return next((vm for vm in self.vms() if vm["name"] == name), None)

    def disks(self) -> list[dict[str, Any]]:
        return list(self.state()["disks"])

    def request_counts(self) -> dict[str, int]:
        """API requests so far by ``"<METHOD> <route>"``, e.g. ``"GET /ovirt-engine/api/vms"``."""
        return dict(self.state()["request_counts"])

    def user_agents(self) -> dict[str, int]:
        """Every User-Agent that called the engine (SSO and API), with its request count."""
        return dict(self.state()["user_agents"])

    def requests(self, limit: int = 1000) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/requests?limit={limit}"))

    def clear_requests(self) -> None:
        self._call("POST", "/requests/clear", {})

    # -- faults ----------------------------------------------------------------------------
    def engine_down(self, mode: str = "refuse") -> None:
        """``refuse``: connections refused; ``proxy_503``: Apache answers 503 with an HTML page."""
        self._call("POST", "/engine", {"mode": mode})

    def engine_up(self) -> None:
        self._call("POST", "/engine", {"mode": "up"})

    def set_vm_status(self, name: str, status: str) -> None:
        """Force a VM into ``status`` (e.g. ``not_responding``) until an action moves it."""
        self._call("POST", "/vm-status", {"name": name, "status": status})

    def revoke_tokens(self) -> None:
        """Expire every SSO token (the SDK must log in again)."""
        self._call("POST", "/tokens/revoke", {})

    def set_password(self, password: str) -> None:
        self._call("POST", "/password", {"password": password})

    def reset(self) -> None:
        """Back to the seed, engine up, request counters cleared."""
        self._call("POST", "/reset", {})
