"""A test's handle on a running emulator: inspect its state, count requests, inject faults.

This talks to the emulator's admin port only; drivers never use it (they go through
``openstacksdk``).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

#: Transition kinds that can be held or failed: ``server`` (build, power), ``loadbalancer``,
#: ``volume``, (hold only) ``server-delete``, and (failure only) ``volume-attach``,
#: ``volume-extend``.
KINDS = ("server", "server-delete", "loadbalancer", "volume", "volume-attach", "volume-extend")


class OpenStackEmulatorAdmin:
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

    def endpoints(self) -> dict[str, str]:
        """Each service's root URL (as the catalog names them)."""
        return dict(self._call("GET", "/endpoints"))

    def rows(self, table: str) -> list[dict[str, Any]]:
        """One table of the snapshot: ``servers``, ``ports``, ``loadbalancers``, ``volumes``..."""
        return list(self.state()[table])

    def request_counts(self) -> dict[str, int]:
        """Requests so far by ``"<METHOD> <service> <route>"``, e.g.
        ``"GET compute /v2.1/servers/detail"``."""
        return dict(self.state()["request_counts"])

    def requests(self, limit: int = 1000) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/requests?limit={limit}"))

    def clear_requests(self) -> None:
        self._call("POST", "/requests/clear", {})

    # -- seeding ---------------------------------------------------------------------------
    def seed_servers(self, count: int, **options: Any) -> list[dict[str, str]]:
        """``count`` ACTIVE servers named ``<prefix>-<i>`` at once (``prefix``, ``start``,
        ``flavor``, ``network``, ``zones``, ``metadata``)."""
        return list(self._call("POST", "/servers", {"count": count, **options}))

    # -- faults ----------------------------------------------------------------------------
    def service_mode(self, service: str, mode: str) -> None:
        """``up``; ``refuse`` (connection refused); ``503`` (HTML from a proxy); ``500``."""
        self._call("POST", "/service", {"service": service, "mode": mode})

    def service_down(self, service: str, mode: str = "refuse") -> None:
        self.service_mode(service, mode)

    def service_up(self, service: str) -> None:
        self.service_mode(service, "up")

    def inject(
        self,
        service: str,
        status: int,
        *,
        method: str = "",
        route: str = "",
        count: int = 1,
        message: str = "Injected fault",
        retry_after_s: int | None = None,
        latency_s: float = 0.0,
    ) -> None:
        """Answer the next ``count`` matching requests (``route``: a regex over the route
        label) with ``status`` (0: normally), after ``latency_s``; ``count`` -1: always."""
        self._call(
            "POST",
            "/faults",
            {
                "service": service,
                "status": status,
                "method": method,
                "route": route,
                "count": count,
                "message": message,
                "retry_after_s": retry_after_s,
                "latency_s": latency_s,
            },
        )

    def clear_faults(self) -> None:
        """Drop injected faults, held kinds and pending failures."""
        self._call("POST", "/faults/clear", {})

    def set_delays(self, **delays: float) -> dict[str, float]:
        """Change simulated delays (``lb_create_s=5`` makes ``PENDING_CREATE`` slow)."""
        return dict(self._call("POST", "/delays", delays))

    def hold(self, kind: str) -> None:
        """Freeze transitions of ``kind`` (e.g. a load balancer stuck in ``PENDING_UPDATE``)."""
        self._call("POST", "/hold", {"kind": kind, "hold": True})

    def hold_after(self, service: str, kind: str, *, method: str = "", route: str = "") -> None:
        """Hold ``kind`` once a matching request succeeded (e.g. ``load-balancer``,
        ``loadbalancer``, ``POST``, ``/lbaas/pools$``): the resource stays ``PENDING_*``."""
        self._call(
            "POST",
            "/hold-after",
            {"service": service, "kind": kind, "method": method, "route": route},
        )

    def held(self) -> list[str]:
        return list(self.state()["held"])

    def release(self, kind: str) -> None:
        self._call("POST", "/hold", {"kind": kind, "hold": False})

    def fail_next(self, kind: str, count: int = 1) -> None:
        """The next ``count`` transitions of ``kind`` end in ``ERROR``."""
        self._call("POST", "/fail-next", {"kind": kind, "count": count})

    def set_quotas(self, **quotas: int | None) -> dict[str, int]:
        """Project quotas, by ``<service>_<resource>`` (``compute_instances=2``,
        ``compute_cores``, ``compute_ram``, ``network_port``, ``volume_volumes``,
        ``volume_gigabytes``); ``None`` or -1 lifts one. Over quota, Nova answers 403, Neutron 409
        ``OverQuota``, Cinder 413, each with its "Quota exceeded" message."""
        payload = {key.replace("_", ".", 1): value for key, value in quotas.items()}
        return dict(self._call("POST", "/quotas", payload)["quotas"])

    def no_valid_host(self, flavor: str, enabled: bool = True) -> None:
        """Servers of ``flavor`` (name or ID) end in ERROR, fault "No valid host was found"."""
        self._call("POST", "/no-valid-host", {"flavor": flavor, "enabled": enabled})

    def counts(self) -> dict[str, int]:
        """Resources made and removed since the reset: ``servers_created``, ``servers_removed``,
        ``ports_created``, ``ports_removed``, ``volumes_created``, ``volumes_removed``."""
        counts = self.state()["counts"]
        return {
            f"{kind}_{what}": int(counts.get(f"{kind}_{what}", 0))
            for kind in ("servers", "ports", "volumes")
            for what in ("created", "removed")
        }

    def set_server_status(self, ref: str, status: str) -> None:
        """Force a server (ID or name) into ``status`` (``SHUTOFF``, ``DELETED``, ``ERROR``...)."""
        self._call("POST", "/server-status", {"ref": ref, "status": status})

    def set_volume_status(self, ref: str, status: str) -> None:
        self._call("POST", "/volume-status", {"ref": ref, "status": status})

    def set_loadbalancer_status(self, ref: str, status: str) -> None:
        """Force a load balancer (ID or name) into ``status`` (e.g. stuck in ``ERROR``)."""
        self._call("POST", "/loadbalancer-status", {"ref": ref, "status": status})

    def revoke_tokens(self) -> None:
        """Expire every token (clients must authenticate again)."""
        self._call("POST", "/tokens/revoke", {})

    def set_password(self, password: str) -> None:
        self._call("POST", "/password", {"password": password})

    def reset(self) -> None:
        """Back to the seed, every service up, counters and faults cleared."""
        self._call("POST", "/reset", {})
