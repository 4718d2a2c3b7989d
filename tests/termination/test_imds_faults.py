"""The IMDS mode's faults without the stack: malformed answers, a metadata service that hangs or
fails, and the parsing of each notice (a loopback HTTP server plays IMDSv2)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import imds
from cloudloop.cloud.aws.imds import Imds, ImdsError
from cloudloop.cloud.termination import EventKind, InstanceInfo, MalformedMessage
from cloudloop.kube.resources import EVENTS
from cloudloop.settings import NthSettings
from starters.termination_imds import ImdsMonitor, dedup_key
from tests.fakes import MemoryKube
from tests.termination.support import metric

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
INSTANCE = InstanceInfo(id="i-0123456789abcdef0", state="running", launch_time=NOW)
IDENTITY = (
    '{"instanceId": "i-0123456789abcdef0", "pendingTime": "2026-05-01T12:00:00Z",'
    ' "availabilityZone": "eu-west-1a", "instanceType": "m5.large"}'
)


@contextlib.contextmanager
def fake_imds(answer: Callable[[str], tuple[int, str] | None]) -> Iterator[tuple[str, list[str]]]:
    """IMDSv2 on loopback: a token for PUT, ``answer(path)`` for GET (``None``: hang)."""
    seen: list[str] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            self._send(200, "token-1")

        def do_GET(self) -> None:
            seen.append(f"{self.path} {self.headers.get(imds.TOKEN_HEADER)}")
            result = answer(self.path)
            if result is None:
                release.wait(30)
                return
            self._send(*result)

        def _send(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def monitor_for(endpoint: str, kube: MemoryKube) -> ImdsMonitor:
    nth = NthSettings(imds_endpoint=endpoint, imds_timeout_s=0.5)
    return ImdsMonitor(
        kube,
        cast(Client, object()),
        Imds(endpoint, timeout_s=0.5),
        nth,
        node="n1",
        task_queue="q",
        cluster="c",
        provider="aws",
    )


def warnings(kube: MemoryKube) -> list[dict[str, Any]]:
    return [o for k, o in kube.objects.items() if k[0] == EVENTS.plural]


def test_parsing_of_each_notice() -> None:
    spot = imds.parse_spot_itn('{"action": "terminate", "time": "2026-05-01T12:02:00Z"}', INSTANCE)
    assert spot.kind == EventKind.SPOT_ITN and spot.event_id.startswith("spot-itn-")
    assert spot.start_time == datetime(2026, 5, 1, 12, 2, tzinfo=UTC)
    rebalance = imds.parse_rebalance('{"noticeTime": "2026-05-01T12:00:00Z"}', INSTANCE)
    assert rebalance.event_id.startswith("rebalance-recommendation-")
    scheduled = imds.parse_scheduled(
        '[{"NotBefore": "21 Jan 2026 09:00:43 GMT", "Code": "system-reboot", "EventId":'
        ' "instance-event-1", "State": "active"}, {"NotBefore": "21 Jan 2026 09:00:43 GMT",'
        ' "Code": "system-reboot", "EventId": "instance-event-2", "State": "canceled"}]',
        INSTANCE,
        NOW,
    )
    assert [e.event_id for e in scheduled] == ["instance-event-1"]
    assert imds.parse_asg_state("InService", INSTANCE, NOW) is None
    asg = imds.parse_asg_state("Terminated", INSTANCE, NOW)
    again = imds.parse_asg_state("Terminated", INSTANCE, datetime.now(UTC))
    assert asg is not None and again is not None and asg.event_id == again.event_id
    identity = imds.parse_identity(IDENTITY)
    assert identity.provider_id == "aws:///eu-west-1a/i-0123456789abcdef0"
    assert identity.launch_time == NOW
    assert dedup_key(spot) == "SPOT_ITN" and dedup_key(scheduled[0]).endswith("instance-event-1")


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (lambda t: imds.parse_spot_itn(t, INSTANCE), "<html>"),
        (lambda t: imds.parse_spot_itn(t, INSTANCE), '{"action": "terminate", "time": "soon"}'),
        (lambda t: imds.parse_spot_itn(t, INSTANCE), "[1, 2]"),
        (lambda t: imds.parse_rebalance(t, INSTANCE), "{}"),
        (lambda t: imds.parse_scheduled(t, INSTANCE, NOW), '{"EventId": "x"}'),
        (lambda t: imds.parse_scheduled(t, INSTANCE, NOW), '[{"EventId": "x", "NotBefore": "?"}]'),
        (imds.parse_identity, '{"instanceId": 7}'),
    ],
)
def test_malformed_answers_are_malformed(parse: Callable[[str], object], text: str) -> None:
    with pytest.raises(MalformedMessage):
        parse(text)


def test_malformed_and_failing_monitors_give_one_warning_each_and_go_on() -> None:
    def answer(path: str) -> tuple[int, str]:
        if path == imds.IDENTITY_PATH:
            return 200, IDENTITY
        if path == imds.SPOT_ITN_PATH:
            return 200, '{"action": "terminate", "time": "garbage"}'
        if path == imds.SCHEDULED_PATH:
            return 500, "oops"
        return 404, ""

    kube = MemoryKube()
    before = metric("events_error_total", {"event_error_where": "imds-SPOT_ITN_MONITOR"})
    with fake_imds(answer) as (endpoint, seen):
        monitor = monitor_for(endpoint, kube)
        assert asyncio.run(monitor.identify()) is not None
        for _ in range(3):
            assert asyncio.run(monitor.poll_once()) == []
    assert all(line.endswith(" token-1") for line in seen), seen  # IMDSv2: token on every GET
    after = metric("events_error_total", {"event_error_where": "imds-SPOT_ITN_MONITOR"})
    assert after == before + 3
    found = sorted((e["reason"], e["message"].split(":")[0]) for e in warnings(kube))
    assert found == [
        (
            "MonitorError",
            "There was a problem monitoring for events in monitor 'SCHEDULED_EVENT_MONITOR'",
        ),
        ("MonitorError", "There was a problem monitoring for events in monitor 'SPOT_ITN_MONITOR'"),
    ], found
    assert "malformed answer" in " ".join(e["message"] for e in warnings(kube))


def test_a_hanging_metadata_service_times_out() -> None:
    def answer(path: str) -> tuple[int, str] | None:
        return (200, IDENTITY) if path == imds.IDENTITY_PATH else None

    kube = MemoryKube()
    with fake_imds(answer) as (endpoint, _):
        monitor = monitor_for(endpoint, kube)
        assert asyncio.run(monitor.identify()) is not None
        started = time.monotonic()
        assert asyncio.run(monitor.poll_once()) == []
        elapsed = time.monotonic() - started
        with pytest.raises(ImdsError):
            Imds(endpoint, timeout_s=0.2).get(imds.SPOT_ITN_PATH)
    assert elapsed < 4 * 0.5 + 5, elapsed  # four monitors, each bounded by the timeout
    assert [e["reason"] for e in warnings(kube)] == ["MonitorError"] * 4


def test_no_metadata_service_at_all_is_retried_not_fatal() -> None:
    kube = MemoryKube()
    monitor = monitor_for("http://127.0.0.1:9", kube)

    async def briefly() -> None:
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(1.5)
        monitor.stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(briefly())
    assert monitor.instance is None
    assert [e["reason"] for e in warnings(kube)] == ["MonitorError"]
