"""The IMDS mode's faults without the stack: malformed answers, a metadata service that hangs or
fails, the parsing of each notice (a loopback HTTP server plays IMDSv2), the node agent's
notices on its Node (an in-memory API server), and the starter's reading of malformed ones."""

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
from cloudloop.kube.informer import WatchEvent
from cloudloop.kube.resources import EVENTS, NODES
from cloudloop.messages.termination import NOTICES_ANNOTATION, NodeNotices
from cloudloop.nodeagents.termination_imds import ImdsAgent
from cloudloop.rules.termination import InvalidNotices, notice_key, read_node_notices
from cloudloop.settings import ImdsAgentNthSettings, NthSettings
from starters.termination_imds import INVALID_NOTICE, ImdsNotices
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
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def monitor_for(endpoint: str, kube: MemoryKube) -> ImdsAgent:
    nth = ImdsAgentNthSettings(imds_endpoint=endpoint, imds_timeout_s=0.5)
    if kube.get(NODES, "n1") is None:
        kube.put(NODES, {"metadata": {"name": "n1"}})
    return ImdsAgent(kube, Imds(endpoint, timeout_s=0.5), nth, node="n1")


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
    assert notice_key(spot) == "SPOT_ITN" and notice_key(scheduled[0]).endswith("instance-event-1")


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


# -- the node agent's notices on its Node ----------------------------------------------------
SPOT = '{"action": "terminate", "time": "2026-05-01T12:02:00Z"}'


def spot_and_rebalance(path: str) -> tuple[int, str]:
    if path == imds.IDENTITY_PATH:
        return 200, IDENTITY
    if path == imds.SPOT_ITN_PATH:
        return 200, SPOT
    if path == imds.REBALANCE_PATH:
        return 200, '{"noticeTime": "2026-05-01T12:00:00Z"}'
    return 404, ""


def node_notices(kube: MemoryKube, node: str = "n1") -> NodeNotices:
    text = kube.objects[(NODES.plural, "", node)]["metadata"]["annotations"][NOTICES_ANNOTATION]
    return read_node_notices(text)


def test_the_agent_records_each_notice_once_on_its_own_node_only() -> None:
    """Spot and rebalance notices: one patch of the one annotation on its Node, one Normal Event
    each; polled again, and after a restart (read back from the Node), nothing is written."""
    kube = MemoryKube()
    kube.put(NODES, {"metadata": {"name": "other"}})
    with fake_imds(spot_and_rebalance) as (endpoint, _):
        agent = monitor_for(endpoint, kube)
        assert asyncio.run(agent.identify()) is not None
        recorded = asyncio.run(agent.poll_once())
        assert len(recorded) == 2
        assert asyncio.run(agent.poll_once()) == []
        again = monitor_for(endpoint, kube)
        assert asyncio.run(again.identify()) is not None
        assert asyncio.run(again.poll_once()) == []

    notices = node_notices(kube)
    assert notices.instance_id == INSTANCE.id and notices.instance_launch_time == NOW
    assert [n.kind for n in notices.notices] == [
        EventKind.SPOT_ITN,
        EventKind.REBALANCE_RECOMMENDATION,
    ]
    node_writes = [w for w in kube.writes if w[1][0] == NODES.plural]
    assert [(verb, key[2]) for verb, key, _ in node_writes] == [("patch", "n1")]
    assert node_writes[0][2] == {"metadata": {"annotations": {NOTICES_ANNOTATION: ANY_TEXT}}}
    reasons = sorted(e["reason"] for e in warnings(kube))
    assert reasons == ["RebalanceRecommendation", "SpotInterruption"]
    assert {e["involvedObject"]["name"] for e in warnings(kube)} == {"n1"}


class _AnyText(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)

    __hash__ = str.__hash__


ANY_TEXT = _AnyText()


def test_a_refused_write_is_written_at_the_next_poll() -> None:
    kube = MemoryKube()
    with fake_imds(spot_and_rebalance) as (endpoint, _):
        agent = monitor_for(endpoint, kube)
        assert asyncio.run(agent.identify()) is not None
        kube.fail_next = 1
        assert asyncio.run(agent.poll_once()) == []
        assert not [e for e in warnings(kube) if e["type"] == "Normal"]
        assert len(asyncio.run(agent.poll_once())) == 2
    assert len(node_notices(kube).notices) == 2


def test_a_new_incarnation_replaces_the_notices_of_the_old_one() -> None:
    kube = MemoryKube()
    old = NodeNotices(
        instance_id="i-0aaaaaaaaaaaaaaaa",
        notices=[
            imds.parse_spot_itn(SPOT, InstanceInfo(id="i-0aaaaaaaaaaaaaaaa", state="running"))
        ],
    )
    kube.put(
        NODES,
        {"metadata": {"name": "n1", "annotations": {NOTICES_ANNOTATION: old.model_dump_json()}}},
    )
    with fake_imds(spot_and_rebalance) as (endpoint, _):
        nth = ImdsAgentNthSettings(imds_endpoint=endpoint, imds_timeout_s=0.5)
        agent = ImdsAgent(kube, Imds(endpoint, timeout_s=0.5), nth, node="n1")
        assert asyncio.run(agent.identify()) is not None
        assert agent.notices is not None and agent.notices.notices == []
        assert len(asyncio.run(agent.poll_once())) == 2
    assert node_notices(kube).instance_id == INSTANCE.id


# -- the starter's reading of a Node's notices -----------------------------------------------
def _notices_text(instance_id: str = INSTANCE.id, about: str = "") -> str:
    event = imds.parse_spot_itn(SPOT, InstanceInfo(id=about or instance_id, state="running"))
    return NodeNotices(
        instance_id=instance_id, instance_launch_time=NOW, notices=[event]
    ).model_dump_json()


@pytest.mark.parametrize(
    ("text", "provider_id", "why"),
    [
        pytest.param("{not json", "", "not a notices document", id="not-json"),
        pytest.param('{"notices": []}', "", "not a notices document", id="no-instance"),
        pytest.param('{"instance_id": "i-1", "notices": [{"kind": "?"}]}', "", "not a", id="bad"),
        pytest.param(_notices_text(about="i-0bbbbbbbbbbbbbbbb"), "", "notices about", id="other"),
        pytest.param(
            _notices_text(), "aws:///eu-west-1a/i-0cccccccccccccccc", "is not the Node's", id="pid"
        ),
    ],
)
def test_invalid_notices_are_refused(text: str, provider_id: str, why: str) -> None:
    with pytest.raises(InvalidNotices, match=why):
        read_node_notices(text, provider_id)


def _node(name: str, text: str, provider_id: str = "") -> WatchEvent[Any]:
    node: dict[str, Any] = {"metadata": {"name": name, "annotations": {NOTICES_ANNOTATION: text}}}
    if provider_id:
        node["spec"] = {"providerID": provider_id}
    return WatchEvent("MODIFIED", cast(Any, node))


def _starter(kube: MemoryKube) -> ImdsNotices:
    return ImdsNotices(
        kube, cast(Client, object()), NthSettings(), task_queue="q", cluster="c", provider="aws"
    )


def test_malformed_notices_drain_nothing_and_warn_once_per_annotation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Any] = []

    async def start_drain(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise AssertionError("no drain for an invalid notice")

    monkeypatch.setattr("starters.termination_imds.start_drain", start_drain)
    kube = MemoryKube()
    starter = _starter(kube)
    before = metric("events_error_total", {"event_error_where": "imds-notice"})
    for _ in range(2):
        assert asyncio.run(starter.handle(_node("n1", "{garbage"))) == []
    pid = "aws:///eu-west-1a/i-0cccccccccccccccc"
    assert asyncio.run(starter.handle(_node("n2", _notices_text(), pid))) == []

    assert calls == []
    found = sorted((e["reason"], e["involvedObject"]["name"]) for e in warnings(kube))
    assert found == [(INVALID_NOTICE, "n1"), (INVALID_NOTICE, "n2")]
    assert metric("events_error_total", {"event_error_where": "imds-notice"}) == before + 2


def test_notices_drain_the_node_they_are_on_once_and_a_failed_start_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, str, str]] = []
    fail = [True]

    async def start_drain(client: Any, nth: Any, event: Any, instance: Any, node: str, **_: Any):  # type: ignore[no-untyped-def]
        if fail and fail.pop():
            raise RuntimeError("Temporal unreachable")
        calls.append((node, instance.id, event.event_id))
        return f"drain/{node}", None, object()

    monkeypatch.setattr("starters.termination_imds.start_drain", start_drain)
    starter = _starter(MemoryKube())
    event = _node("n1", _notices_text(), f"aws:///eu-west-1a/{INSTANCE.id}")
    assert asyncio.run(starter.handle(event)) == []
    assert starter.state["n1"].retry
    assert asyncio.run(starter.handle(event)) == ["drain/n1"]
    assert asyncio.run(starter.handle(event)) == []  # seen: nothing started again
    assert [(n, i) for n, i, _ in calls] == [("n1", INSTANCE.id)]
    deleted = WatchEvent("DELETED", event.object)
    assert asyncio.run(starter.handle(deleted)) == [] and "n1" not in starter.state


def test_a_notice_drains_under_the_cluster_s_id_scope_as_the_queue_mode_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The IMDS starter names the drain as the queue mode does for the same notice (the
    cluster's ID scope included, issue 39 item 4), so both modes join one drain and another
    cluster's Node of the same name never shares it."""
    scopes: list[str] = []

    async def start_drain(*args: Any, id_scope: str = "", **_: Any) -> Any:
        scopes.append(id_scope)
        return f"{id_scope}/drain/n1", None, object()

    monkeypatch.setattr("starters.termination_imds.start_drain", start_drain)
    starter = ImdsNotices(
        MemoryKube(),
        cast(Client, object()),
        NthSettings(),
        task_queue="cloudloop-alpha-drain",
        cluster="alpha",
        provider="aws",
        id_scope="cloudloop-alpha",
    )
    event = _node("n1", _notices_text(), f"aws:///eu-west-1a/{INSTANCE.id}")
    assert asyncio.run(starter.handle(event)) == ["cloudloop-alpha/drain/n1"]
    assert scopes == ["cloudloop-alpha"]
