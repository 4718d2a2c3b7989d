"""Pure rules of the node drain: kubectl drain's pod filters, PDB selectors, workflow identity,
the webhook template and the lifecycle extension's bookkeeping."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from activities.termination import classify_pods, selector_matches
from activities.webhook import go_time, render, send, template_fields
from cloudloop.kube.bodies import LabelSelector, ObjectMeta, Pod, Volume
from cloudloop.messages.termination import (
    EventKind,
    InterruptionEvent,
    ListPodsInput,
    WebhookInput,
    drain_workflow_id,
)
from cloudloop.settings import NTH_WEBHOOK_TEMPLATE
from devstack.autoscaling_ext import LifecycleLedger
from workflows.termination import is_cordon_only

LAUNCH = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)


def pod(
    name: str,
    *,
    owner: str | None = "ReplicaSet",
    phase: str = "Running",
    empty_dir: bool = False,
    mirror: bool = False,
) -> Pod:
    meta: ObjectMeta = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    volumes: list[Volume] = [{"name": "scratch", "emptyDir": {}}] if empty_dir else []
    return {"metadata": meta, "spec": {"volumes": volumes}, "status": {"phase": phase}}


PODS = [
    pod("web"),
    pod("ds", owner="DaemonSet"),
    pod("static", owner="Node", mirror=True),
    pod("cache", empty_dir=True),
    pod("bare", owner=None),
    pod("done", owner=None, phase="Succeeded", empty_dir=True),
]


@pytest.mark.parametrize(
    ("flags", "evict", "skipped", "refused"),
    [
        pytest.param(
            {},
            {"web", "cache", "bare", "done"},
            {"ds", "static"},
            set(),
            id="nth-defaults",
        ),
        pytest.param(
            {"ignore_daemonsets": False, "delete_emptydir_data": False, "force": False},
            {"web", "done"},
            {"static"},
            {"ds", "cache", "bare"},
            id="kubectl-defaults",
        ),
        pytest.param(
            {"force": False},
            {"web", "cache", "done"},
            {"ds", "static"},
            {"bare"},
            id="unmanaged-refused",
        ),
    ],
)
def test_pod_filters(
    flags: dict[str, bool], evict: set[str], skipped: set[str], refused: set[str]
) -> None:
    plan = classify_pods(PODS, ListPodsInput(node="n", **flags))
    assert {p.name for p in plan.evict} == evict
    assert {n.pod.name for n in plan.skipped} == skipped
    assert {n.pod.name for n in plan.refused} == refused


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param(None, {"app": "x"}, False, id="null-selects-nothing"),
        pytest.param({}, {"app": "x"}, True, id="empty-selects-all"),
        pytest.param({"matchLabels": {"app": "x"}}, {"app": "x", "t": "1"}, True, id="labels"),
        pytest.param({"matchLabels": {"app": "x"}}, {"app": "y"}, False, id="labels-differ"),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]},
            {"app": "y"},
            True,
            id="in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]},
            {"app": "x"},
            False,
            id="not-in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {}, False, id="exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]},
            {},
            True,
            id="does-not-exist",
        ),
    ],
)
def test_pdb_selector(
    selector: LabelSelector | None, labels: dict[str, str], matches: bool
) -> None:
    assert selector_matches(selector, labels) is matches


def event(kind: EventKind) -> InterruptionEvent:
    return InterruptionEvent(
        event_id="e-1", kind=kind, instance_id="i-1", start_time=LAUNCH, description="d"
    )


def test_one_workflow_id_per_interruption_of_an_incarnation() -> None:
    node = "ip-10-0-0-1.ec2.internal"
    assert drain_workflow_id(node, "i-1", LAUNCH) == f"drain/{node}/i-1/20240501T100000Z"
    relaunched = drain_workflow_id(node, "i-1", LAUNCH.replace(hour=11))
    assert relaunched != drain_workflow_id(node, "i-1", LAUNCH)
    assert drain_workflow_id(node, "i-1", LAUNCH, cordon_only=True).endswith("/cordon")


@pytest.mark.parametrize(
    ("kind", "cordon_only", "rebalance_drains", "expected"),
    [
        pytest.param(EventKind.REBALANCE_RECOMMENDATION, False, False, True, id="rebalance"),
        pytest.param(
            EventKind.REBALANCE_RECOMMENDATION, False, True, False, id="rebalance-draining"
        ),
        pytest.param(EventKind.SPOT_ITN, False, False, False, id="spot"),
        pytest.param(EventKind.ASG_LIFECYCLE, True, False, True, id="cordon-only"),
    ],
)
def test_cordon_only(
    kind: EventKind, cordon_only: bool, rebalance_drains: bool, expected: bool
) -> None:
    assert (
        is_cordon_only(event(kind), cordon_only=cordon_only, rebalance_drains=rebalance_drains)
        is expected
    )


def test_taint_value_is_a_label_value() -> None:
    long = event(EventKind.SCHEDULED_EVENT).model_copy(
        update={"event_id": "scheduled-change-" + "a/b:" * 30}
    )
    assert len(long.taint_value) <= 63
    assert all(c.isalnum() or c in "-._" for c in long.taint_value)


def test_default_webhook_template_renders_valid_json() -> None:
    fields = template_fields(
        WebhookInput(
            event_id="spot-itn-1",
            kind="SPOT_ITN",
            instance_id="i-1",
            node_name="node-a",
            description='said "bye"\nnow',
            start_time=datetime(2020, 7, 1, 22, 19, 58, tzinfo=UTC),
        )
    )
    body = json.loads(render(NTH_WEBHOOK_TEMPLATE, fields, json_escape=True))
    assert body["text"] == (
        "[NTH][Instance Interruption] EventID: spot-itn-1 - Kind: SPOT_ITN - Instance: i-1 - "
        'Node: node-a - Description: said "bye"\nnow - Start Time: 2020-07-01 22:19:58 +0000 UTC'
    )
    assert render("{{ .Nope }}/{{.NodeName}}", fields) == "<no value>/node-a"
    assert go_time(datetime(2020, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)).startswith(
        "2020-01-02 03:04:05.5 "
    )


def test_lifecycle_ledger_answers_like_aws() -> None:
    ledger = LifecycleLedger()
    params = {"LifecycleActionToken": "t-1", "InstanceId": "i-1"}
    assert ledger.answer("RecordLifecycleActionHeartbeat", params)[0] == 200
    assert ledger.answer("CompleteLifecycleAction", params)[0] == 200
    status, code, message = ledger.answer("CompleteLifecycleAction", params)
    assert (status, code) == (400, "ValidationError")
    assert "No active Lifecycle Action" in message
    assert ledger.answer("RecordLifecycleActionHeartbeat", params)[0] == 400
    ledger.faults["CompleteLifecycleAction"] = [503]
    assert ledger.answer("CompleteLifecycleAction", {"LifecycleActionToken": "t-2"})[0] == 503
    assert ledger.answer("CompleteLifecycleAction", {"LifecycleActionToken": "t-2"})[0] == 200
    assert [c["status"] for c in ledger.calls] == [200, 200, 400, 400, 503, 200]


@pytest.mark.parametrize("status", [pytest.param(200, id="ok"), pytest.param(500, id="non-2xx")])
def test_webhook_post_reports_status_and_never_raises(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    hook = WebhookInput(
        event_id="e",
        kind="SPOT_ITN",
        instance_id="i-1",
        node_name="n",
        description="d",
        start_time=LAUNCH,
    )
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        assert send(url, {"Content-type": "application/json"}, NTH_WEBHOOK_TEMPLATE, hook) == status
        assert len(received) == 1 and json.loads(received[0])["text"].startswith("[NTH]")
        assert ("answered 500" in caplog.text) is (status == 500)
    finally:
        server.shutdown()
        server.server_close()
    assert send("http://127.0.0.1:9/", {}, "x", hook) is None  # nothing listens: logged only
