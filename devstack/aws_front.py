"""The dev stack's AWS front: moto behind the limits and throttling real AWS applies.

Every AWS call of the product in tests, benchmarks and ``cloudloop dev`` goes through this proxy
(``stack.aws_endpoint``). It refuses, as AWS does, requests beyond the limits the product's code
depends on (:func:`devstack.aws_limits.check_limits`: filter values, ``MaxResults`` ranges, batch
sizes), answers ``RequestLimitExceeded``/``Throttling`` past a configured request rate or for a
share of requests during a "throttling storm", answers the Auto Scaling lifecycle actions moto
cannot (:mod:`devstack.autoscaling_ext`), and forwards everything else to moto unchanged — so a
test or a benchmark cannot pass on moto's leniency.

Admin endpoints (JSON): ``POST /_cloudloop/aws/limits`` with ``{"rate_per_s": r, "burst": b,
"storm": {"fraction": 0.5, "duration_s": 60, "services": ["ec2"]}}`` (``{"storm": {}}`` ends a
storm, ``"rate_per_s": null`` lifts the rate); ``GET /_cloudloop/aws/stats`` (requests and
refusals by service, action and code; ``DELETE`` resets them); the lifecycle endpoints of
:mod:`devstack.autoscaling_ext`. Two switches for fault tests: ``POST /_cloudloop/aws/faults``
``{"service": "ec2", "action": "RunInstances", "code": "InstanceLimitExceeded", "message": m,
"status": 400, "count": 1}`` answers the next ``count`` such requests with that AWS error (moto
never answers quota or capacity errors; ``DELETE`` clears them), and ``POST
/_cloudloop/aws/holds`` ``{"RunInstances": 1.5}`` holds each answer of an action that long after
moto made it, so a test can stop a client between "done in the cloud" and "answer received"
(``{}`` lifts every hold). ``POST /_cloudloop/aws/latency`` ``{"min_s": 0.1, "max_s": 0.3}``
answers every request moto serves after a delay drawn uniformly from that range, as a real AWS
endpoint answers in 100-300 ms (off by default: moto answers in milliseconds; ``{}`` turns it
off); each request waits on its own connection thread, so the delay costs no CPU and does not
serialise concurrent requests. A second ``ModifyVolume`` of a volume within six hours is
``VolumeModificationRateExceeded``, as AWS answers it; ``POST /_cloudloop/aws/ebs-cooldown``
``{"seconds": s}`` shortens that for a test (0: off). Other ``/_cloudloop/`` paths go to moto
(:mod:`devstack.moto_ext`). ``python -m devstack.aws_front --port P --upstream URL
[--rate R --burst B]`` runs it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devstack.autoscaling_ext import (
    CALLS_PATH,
    FAULTS_PATH,
    HANDLED,
    HEALTH_PATH,
    LifecycleLedger,
    error_xml,
    success_xml,
)
from devstack.aws_limits import (
    EbsVolumeState,
    RateLimiter,
    Refusal,
    check_ebs,
    check_limits,
    service_of,
    throttled,
)

LIMITS_PATH = "/_cloudloop/aws/limits"
STATS_PATH = "/_cloudloop/aws/stats"
AWS_FAULTS_PATH = "/_cloudloop/aws/faults"
HOLDS_PATH = "/_cloudloop/aws/holds"
LATENCY_PATH = "/_cloudloop/aws/latency"
EBS_COOLDOWN_PATH = "/_cloudloop/aws/ebs-cooldown"
#: EBS takes one ModifyVolume per volume every six hours (EC2 API Reference, ModifyVolume).
EBS_MODIFICATION_COOLDOWN_S = 6 * 3600.0
EBS_COOLDOWN_REFUSAL = Refusal(
    400,
    "VolumeModificationRateExceeded",
    "You've reached the maximum modification rate per volume limit. Wait at least 6 hours "
    "between modifications per EBS volume.",
)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "trailer"}


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()  # "service:Action"
        self.refused: Counter[str] = Counter()  # "service:Action:Code", answered by the front
        self.errors: Counter[str] = Counter()  # "service:Action:Code", answered by moto

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": dict(self.requests),
                "refused": dict(self.refused),
                "errors": dict(self.errors),
            }

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.refused.clear()
            self.errors.clear()


def _refusal_body(service: str, refusal: Refusal) -> tuple[bytes, str, dict[str, str]]:
    request_id = str(uuid.uuid4())
    if service == "ec2":
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
            f"<Code>{refusal.code}</Code><Message>{refusal.message}</Message></Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        )
        return xml.encode(), "text/xml", {}
    if service == "sqs":
        body = json.dumps(
            {"__type": f"com.amazonaws.sqs#{refusal.code}", "message": refusal.message}
        )
        headers = {"x-amzn-query-error": f"{refusal.code};Sender"}
        return body.encode(), "application/x-amz-json-1.0", headers
    return error_xml(refusal.status, refusal.code, refusal.message).encode(), "text/xml", {}


# -- EBS volume limits -------------------------------------------------------------------------
# CreateVolume/ModifyVolume outside their type's size, IOPS and throughput limits are answered as
# AWS answers them (:func:`devstack.aws_limits.check_ebs`); a ModifyVolume is checked against the
# volume as moto describes it (type, size, IOPS, throughput).
#: The EC2 actions :func:`devstack.aws_limits.check_ebs` answers for.
EBS_ACTIONS = frozenset({"CreateVolume", "ModifyVolume"})


def ebs_volume_state(describe_volumes_xml: str) -> EbsVolumeState | None:
    """The first volume of a DescribeVolumes answer (type, size, IOPS, throughput)."""
    item = re.search(r"<item>(.*?)</item>", describe_volumes_xml, re.DOTALL)
    if item is None:
        return None

    def field(name: str) -> str:
        found = re.search(rf"<{name}>([^<]*)</{name}>", item.group(1))
        return found.group(1) if found else ""

    def number(name: str) -> int:
        value = field(name)
        return int(value) if value.isascii() and value.isdigit() else 0

    if not field("volumeType"):
        return None
    return EbsVolumeState(
        volume_type=field("volumeType"),
        size_gib=number("size"),
        iops=number("iops"),
        throughput=number("throughput"),
    )


# -- end of EBS volume limits ------------------------------------------------------------------
def _error_code(payload: bytes) -> str:
    """The error code of an AWS error answer (XML ``<Code>`` or JSON ``__type``)."""
    text = payload[:4096].decode(errors="replace")
    match = re.search(r"<Code>([^<]+)</Code>", text)
    if match:
        return match.group(1)
    match = re.search(r'"__type"\s*:\s*"(?:[^"#]*#)?([^"]+)"', text)
    return match.group(1) if match else "unknown"


def make_server(
    port: int,
    upstream: str,
    host: str = "127.0.0.1",
    *,
    rate_per_s: float | None = None,
    burst: float = 50.0,
) -> ThreadingHTTPServer:
    ledger = LifecycleLedger()
    limiter = RateLimiter(rate_per_s=rate_per_s, burst=burst)
    stats = Stats()
    target = urllib.parse.urlsplit(upstream)
    #: (service, action) → the refusals still to answer; action → seconds an answer is held.
    faults: dict[tuple[str, str], list[Refusal]] = {}
    holds: dict[str, float] = {}
    #: (min, max) seconds added to every answer moto makes; (0, 0): none.
    latency = [0.0, 0.0]
    #: The EBS modification cooldown, and when each volume's last ModifyVolume was accepted.
    cooldown = [EBS_MODIFICATION_COOLDOWN_S]
    modified: dict[str, float] = {}
    switches = threading.Lock()

    def in_cooldown(volume_id: str) -> bool:
        with switches:
            last = modified.get(volume_id)
            return last is not None and time.monotonic() - last < cooldown[0]

    def next_fault(service: str, action: str) -> Refusal | None:
        with switches:
            queued = faults.get((service, action))
            return queued.pop(0) if queued else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _send(
            self,
            status: int,
            body: bytes,
            content_type: str,
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _admin(self, body: bytes) -> bool:
            path = self.path
            if path == HEALTH_PATH:
                self._send(200, b"ok\n", "text/plain")
            elif path == CALLS_PATH:
                with ledger.lock:
                    payload = json.dumps({"calls": ledger.calls}).encode()
                self._send(200, payload, "application/json")
            elif path == FAULTS_PATH and self.command == "POST":
                fault = json.loads(body or b"{}")
                with ledger.lock:
                    ledger.faults.setdefault(str(fault["action"]), []).extend(
                        [int(fault.get("status", 500))] * int(fault.get("count", 1))
                    )
                self._send(200, b"{}", "application/json")
            elif path == LIMITS_PATH and self.command == "POST":
                limiter.configure(json.loads(body or b"{}"))
                self._send(200, b"{}", "application/json")
            elif path == AWS_FAULTS_PATH and self.command in ("POST", "DELETE"):
                with switches:
                    if self.command == "DELETE":
                        faults.clear()
                    else:
                        fault = json.loads(body or b"{}")
                        refusal = Refusal(
                            int(fault.get("status", 400)),
                            str(fault["code"]),
                            str(fault.get("message", fault["code"])),
                        )
                        key = (str(fault.get("service", "ec2")), str(fault["action"]))
                        faults.setdefault(key, []).extend([refusal] * int(fault.get("count", 1)))
                self._send(200, b"{}", "application/json")
            elif path == HOLDS_PATH and self.command == "POST":
                with switches:
                    holds.clear()
                    holds.update({str(k): float(v) for k, v in json.loads(body or b"{}").items()})
                self._send(200, b"{}", "application/json")
            elif path == LATENCY_PATH and self.command == "POST":
                settings = json.loads(body or b"{}")
                low = float(settings.get("min_s", 0.0))
                high = max(low, float(settings.get("max_s", low)))
                with switches:
                    latency[:] = [low, high]
                self._send(200, b"{}", "application/json")
            elif path == EBS_COOLDOWN_PATH and self.command == "POST":
                with switches:
                    cooldown[0] = float(json.loads(body or b"{}").get("seconds", 0.0))
                self._send(200, b"{}", "application/json")
            elif path == STATS_PATH:
                if self.command == "DELETE":
                    stats.reset()
                self._send(200, json.dumps(stats.snapshot()).encode(), "application/json")
            else:
                return False
            return True

        def _handle(self) -> None:
            body = self._body()
            if self.path.startswith("/_cloudloop/") and self._admin(body):
                return
            service = service_of(self.headers.get("Authorization", ""))
            action, params = self._parse(body)
            with stats.lock:
                stats.requests[f"{service}:{action}"] += 1
            refusal = check_limits(service, action, params)
            # -- EBS volume limits (CreateVolume/ModifyVolume as AWS refuses them) -----------
            if refusal is None and service == "ec2" and action in EBS_ACTIONS:
                current = self._ebs_volume(params) if action == "ModifyVolume" else None
                refusal = check_ebs(action, params, current)
                volume_id = str(params.get("VolumeId", ""))
                if refusal is None and action == "ModifyVolume" and in_cooldown(volume_id):
                    refusal = EBS_COOLDOWN_REFUSAL
            # -- end of EBS volume limits ------------------------------------------------------
            if refusal is None and service not in ("", "tagging") and not limiter.admit(service):
                refusal = throttled(service)
            if refusal is None:
                refusal = next_fault(service, action)
            if refusal is not None:
                with stats.lock:
                    stats.refused[f"{service}:{action}:{refusal.code}"] += 1
                payload, content_type, headers = _refusal_body(service, refusal)
                self._send(refusal.status, payload, content_type, headers)
                return
            if service == "autoscaling" and action in HANDLED:
                status, code, message = ledger.answer(action, params)
                xml = success_xml(action) if status == 200 else error_xml(status, code, message)
                self._send(status, xml.encode(), "text/xml")
                return
            with switches:
                hold_s = holds.get(action, 0.0)
                low, high = latency
            if high > 0:
                hold_s += random.uniform(low, high)
            status, payload = self._forward(body, hold_s)
            if status == 200 and service == "ec2" and action == "ModifyVolume":
                with switches:
                    modified[str(params.get("VolumeId", ""))] = time.monotonic()
            if status >= 400:
                code = _error_code(payload)
                with stats.lock:
                    stats.errors[f"{service}:{action}:{code}"] += 1

        def _parse(self, body: bytes) -> tuple[str, dict[str, Any]]:
            """The action and its parameters (query form, or an ``X-Amz-Target`` JSON body)."""
            content_type = self.headers.get("Content-Type", "")
            if self.command == "POST" and "x-www-form-urlencoded" in content_type:
                params = dict(urllib.parse.parse_qsl(body.decode(errors="replace")))
                return str(params.get("Action", "")), params
            target_header = self.headers.get("X-Amz-Target", "")
            if target_header and "json" in content_type:
                try:
                    parsed = json.loads(body or b"{}")
                except ValueError:
                    parsed = {}
                return target_header.rsplit(".", 1)[-1], parsed if isinstance(parsed, dict) else {}
            query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
            return str(query.get("Action", "")), query

        # -- EBS volume limits: the volume a ModifyVolume changes, as moto describes it -------
        def _ebs_volume(self, params: dict[str, Any]) -> EbsVolumeState | None:
            """The volume ``VolumeId`` names (None when moto does not know it or is not
            reachable: moto then answers the ModifyVolume itself). moto reads no signature, so
            the request's own ``Authorization`` header routes the DescribeVolumes to EC2."""
            body = urllib.parse.urlencode(
                {
                    "Action": "DescribeVolumes",
                    "Version": str(params.get("Version") or "2016-11-15"),
                    "VolumeId.1": str(params.get("VolumeId", "")),
                }
            ).encode()
            headers = {
                "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
                "Authorization": self.headers.get("Authorization", ""),
            }
            connection = http.client.HTTPConnection(
                target.hostname or "127.0.0.1", target.port or 80, timeout=30
            )
            try:
                connection.request("POST", "/", body=body, headers=headers)
                response = connection.getresponse()
                payload = response.read().decode(errors="replace")
            except OSError:
                return None
            finally:
                connection.close()
            if response.status != 200:
                return None
            return ebs_volume_state(payload)

        # -- end of EBS volume limits --------------------------------------------------------
        def _forward(self, body: bytes, hold_s: float = 0.0) -> tuple[int, bytes]:
            connection = http.client.HTTPConnection(
                target.hostname or "127.0.0.1", target.port or 80, timeout=60
            )
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                connection.request(self.command, self.path, body=body or None, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                if hold_s > 0:
                    time.sleep(hold_s)  # done in moto, not yet answered
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return int(response.status), payload
            except OSError as exc:
                self._send(502, f"upstream: {exc}".encode(), "text/plain")
                return 502, b""
            finally:
                connection.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


# -- test helpers ----------------------------------------------------------------------------
def _post(endpoint: str, path: str, payload: dict[str, Any]) -> None:
    request = urllib.request.Request(
        endpoint + path, data=json.dumps(payload).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5):
        pass


def set_limits(endpoint: str, **settings: Any) -> None:
    """Configure the front at ``endpoint``: ``rate_per_s``, ``burst``, ``storm``."""
    _post(endpoint, LIMITS_PATH, settings)


def throttling_storm(
    endpoint: str,
    *,
    fraction: float = 0.5,
    duration_s: float = 60.0,
    services: tuple[str, ...] = (),
) -> None:
    """From now on refuse ``fraction`` of requests as throttled for ``duration_s``."""
    set_limits(
        endpoint,
        storm={"fraction": fraction, "duration_s": duration_s, "services": list(services)},
    )


def set_ebs_cooldown(endpoint: str, seconds: float) -> None:
    """Shorten (or, with 0, lift) the EBS modification cooldown of six hours."""
    _post(endpoint, EBS_COOLDOWN_PATH, {"seconds": seconds})


def inject_fault(
    endpoint: str,
    action: str,
    code: str,
    message: str = "",
    *,
    service: str = "ec2",
    status: int = 400,
    count: int = 1,
) -> None:
    """Answer the next ``count`` ``action`` requests with the AWS error ``code``."""
    _post(
        endpoint,
        AWS_FAULTS_PATH,
        {
            "service": service,
            "action": action,
            "code": code,
            "message": message or code,
            "status": status,
            "count": count,
        },
    )


def clear_faults(endpoint: str) -> None:
    request = urllib.request.Request(endpoint + AWS_FAULTS_PATH, method="DELETE")
    with urllib.request.urlopen(request, timeout=5):
        pass


def hold_answers(endpoint: str, **seconds: float) -> None:
    """Hold each answer of the named actions (``RunInstances=1.5``) after moto made it; no
    arguments lift every hold."""
    _post(endpoint, HOLDS_PATH, seconds)


def set_latency(endpoint: str, min_s: float = 0.0, max_s: float = 0.0) -> None:
    """Answer every request moto serves ``min_s``-``max_s`` seconds late (uniform), as a real
    AWS endpoint does; no arguments turn the delay off."""
    _post(endpoint, LATENCY_PATH, {"min_s": min_s, "max_s": max_s})


def ec2_lifecycle(
    endpoint: str,
    *,
    pending_s: float = 0.0,
    shutting_down_s: float = 0.0,
    volume_creating_s: float = 0.0,
) -> None:
    """moto's instance and volume transitions (through the front to :mod:`devstack.moto_ext`):
    new instances ``pending`` for ``pending_s``, terminated ones ``shutting-down`` for
    ``shutting_down_s``, new volumes ``creating`` for ``volume_creating_s``; zeros make all
    instant again."""
    _post(
        endpoint,
        "/_cloudloop/moto/ec2-lifecycle",
        {
            "pending_s": pending_s,
            "shutting_down_s": shutting_down_s,
            "volume_creating_s": volume_creating_s,
        },
    )


def stats(endpoint: str, *, reset: bool = False) -> dict[str, dict[str, int]]:
    request = urllib.request.Request(endpoint + STATS_PATH, method="DELETE" if reset else "GET")
    with urllib.request.urlopen(request, timeout=5) as response:
        found: dict[str, dict[str, int]] = json.loads(response.read())
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--upstream", required=True, help="moto's server, e.g. http://127.0.0.1:5000"
    )
    parser.add_argument("--rate", type=float, default=None, help="requests per second per service")
    parser.add_argument("--burst", type=float, default=50.0)
    args = parser.parse_args()
    make_server(
        args.port, args.upstream, args.host, rate_per_s=args.rate, burst=args.burst
    ).serve_forever()


if __name__ == "__main__":
    main()
