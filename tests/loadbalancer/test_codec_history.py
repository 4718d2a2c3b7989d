"""Histories are encrypted (issue 39): a real load-balancer workflow with the codec on, its
history read raw from the server by a client without the codec, decoded through a running
``cloudloop codec-server``, and the key rotated while workflows are open.

Against the real stack: kube-apiserver, the Temporal dev server, moto behind the AWS front; the
codec server is a real ``cloudloop codec-server`` process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop import codec, temporal
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.messages.loadbalancer import workflow_id
from cloudloop.net import free_port
from cloudloop.settings import CodecSettings
from devstack.devmode import stack_settings
from devstack.local import LocalStack, StackOptions
from devstack.process import ManagedProcess, http_ok
from tests.helpers import eventually
from tests.loadbalancer.support import AwsWorld, ingress, lb_name, make_service, service_starter
from tests.support.histories import (
    ENCRYPTED,
    decrypt_json,
    encrypted,
    paths_containing,
    payloads_of,
    plain_json,
    raw_history,
    user_payloads,
    without_visible,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack of this module's own: Temporal, moto behind the AWS front and a bare API server
    (the load-balancer path needs no controllers; the test makes its Nodes)."""
    local = LocalStack(StackOptions(state_dir=tmp_path_factory.mktemp("codec-stack")))
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def kube(stack: LocalStack) -> Kube:
    return Kube(api_client(stack.kubeconfig))


@pytest.fixture(scope="module")
async def client(stack: LocalStack) -> Client:
    return await temporal.connect(stack_settings(stack).temporal)


UI_ORIGIN = "http://ui.example:8233"
TOKEN = "codec-test-token-1"


def key_ids(history: dict[str, Any]) -> set[str]:
    return {
        base64.b64decode(p["metadata"][codec.KEY_ID]).decode()
        for p in payloads_of(history)
        if encrypted(p)
    }


async def test_the_raw_history_holds_no_cluster_data_and_the_codec_server_decodes_it(
    kube: Kube,
    client: Client,
    stack: LocalStack,
    lb_config: Settings,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    running: None,
    tmp_path: Path,
) -> None:
    service_name = f"shop-{lb_config.cluster_name[-8:]}"
    tag_value = f"tag-{lb_config.cluster_name[-8:]}-value"
    service = await asyncio.to_thread(
        make_service,
        kube,
        namespace,
        service_name,
        annotations={ann.ADDITIONAL_RESOURCE_TAGS: f"team={tag_value}"},
    )
    await eventually(lambda: ingress(kube, namespace, service_name), what="ingress")
    wf_id = workflow_id(ObjectRef.of(SERVICES, service))
    ips = [
        i["PrivateIpAddress"]
        for r in world.client("ec2").describe_instances(InstanceIds=world.instance_ids)[
            "Reservations"
        ]
        for i in r["Instances"]
    ]

    raw = await raw_history(stack.temporal_address, wf_id)
    raw_text = json.dumps(without_visible(raw))  # search attributes, workflow IDs: readable
    readable = json.dumps(
        plain_json(await client.get_workflow_handle(wf_id).fetch_history(), client)
    )
    # what the history's payloads say (decrypted with the key) ...
    decoded = "\n".join(
        base64.b64decode(p["data"]).decode(errors="replace")
        for p in payloads_of(json.loads(readable))
    )
    for secret in [service_name, tag_value, *world.instance_ids, *nodes]:
        assert secret in decoded, secret
    # ... is not in the raw history: every payload encrypted, failures' texts too
    for secret in [service_name, namespace, tag_value, *world.instance_ids, *nodes, *ips]:
        assert secret not in raw_text, paths_containing(without_visible(raw), secret)
    raw_payloads = user_payloads(raw)
    assert raw_payloads and all(encrypted(p) for p in raw_payloads)
    # the search attributes stay readable: the UI finds the workflow by them
    attributes = json.dumps(raw["events"][0]["workflowExecutionStartedEventAttributes"])
    assert base64.b64encode(json.dumps(service_name).encode()).decode() in attributes

    # the codec server decodes them for the UI (CORS) and the CLI (a bearer token)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# the UI's and the on-call's tokens\n{TOKEN}\n")
    port = free_port()
    server = ManagedProcess(
        "codec-server",
        [sys.executable, "-m", "cloudloop.cli", "codec-server", "--port", str(port)],
        log_dir=tmp_path,
        env={
            **os.environ,
            **stack.codec_env(),
            "CLOUDLOOP_CODEC_SERVER__BIND": "127.0.0.1",
            "CLOUDLOOP_CODEC_SERVER__TOKENS_FILE": str(tokens),
            "CLOUDLOOP_CODEC_SERVER__CORS_ORIGINS": json.dumps([UI_ORIGIN]),
        },
        ready=lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
    )
    server.start()
    try:
        server.wait_ready(120)  # a CLI start on a loaded 2-core machine
        url = f"http://127.0.0.1:{port}"
        body = json.dumps({"payloads": raw_payloads}).encode()

        def call(
            path: str, headers: dict[str, str], *, method: str = "POST", data: bytes = body
        ) -> tuple[int, dict[str, str], bytes]:
            request = urllib.request.Request(
                url + path, data=data if method == "POST" else None, method=method
            )
            for name, value in headers.items():
                request.add_header(name, value)
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    return answer.status, dict(answer.headers), answer.read()
            except urllib.error.HTTPError as exc:
                return exc.code, dict(exc.headers), exc.read()

        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        status, headers, answer = call(
            "/decode", {**auth, "X-Namespace": "default", "Origin": UI_ORIGIN}
        )
        assert status == 200, answer
        assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        assert headers["Access-Control-Allow-Credentials"] == "true"
        decoded_payloads = json.loads(answer)["payloads"]
        assert len(decoded_payloads) == len(raw_payloads)
        assert not any(encrypted(p) for p in decoded_payloads)
        text = "\n".join(base64.b64decode(p["data"]).decode() for p in decoded_payloads)
        assert service_name in text and world.instance_ids[0] in text

        # the UI's preflight: allowed for its origin only, no token needed
        preflight = {
            "Origin": UI_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
        }
        status, headers, _ = call("/decode", preflight, method="OPTIONS")
        assert status == 204 and headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
        assert {"content-type", "x-namespace", "authorization"} <= allowed
        evil = {**preflight, "Origin": "http://evil.example"}
        assert call("/decode", evil, method="OPTIONS")[0] == 403

        # refused: no token, a wrong one, another namespace
        status, headers, _ = call("/decode", {"Origin": UI_ORIGIN})
        assert status == 401 and headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        assert call("/decode", {"Authorization": "Bearer nope"})[0] == 403
        assert call("/decode", {**auth, "X-Namespace": "other"})[0] == 403
        # encode: what the UI sends (a signal from the UI) comes back encrypted
        plain = {"metadata": {"encoding": base64.b64encode(b"json/plain").decode()}, "data": ""}
        status, _, answer = call("/encode", auth, data=json.dumps({"payloads": [plain]}).encode())
        assert status == 200
        [sealed] = json.loads(answer)["payloads"]
        assert sealed["metadata"]["encoding"] == ENCRYPTED
    finally:
        server.stop()
    log = (tmp_path / "codec-server.log").read_text()
    assert "codec POST /decode namespace=default" in log
    assert service_name not in log and TOKEN not in log


async def test_a_key_rotated_with_workflows_open(
    kube: Kube,
    stack: LocalStack,
    lb_config: Settings,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    tmp_path: Path,
) -> None:
    """Workflows started under key A go on under key B after the worker restarts with B active
    (A kept): their new payloads carry B, the old ones still decode; a ring without A says so."""
    keys = tmp_path / "keys"
    codec.write_key(keys, "key-a")

    async def connected(active: str) -> Client:
        settings = lb_config.temporal.model_copy(
            update={"codec": CodecSettings(key_dir=keys, active_key_id=active)}
        )
        return await temporal.connect(settings)

    driver = AwsDriver(AWS.section(lb_config))
    names = ["rot-a", "rot-b"]
    client_a = await connected("key-a")
    async with (
        build_worker(client_a, lb_config, driver=driver, kube=kube),
        service_starter(kube, client_a, lb_config, namespace, driver=driver),
    ):
        services = [await asyncio.to_thread(make_service, kube, namespace, name) for name in names]
        for name in names:
            await eventually(partial(ingress, kube, namespace, name), what=f"{name} ingress")
    ids = [workflow_id(ObjectRef.of(SERVICES, s)) for s in services]
    before = {i: len((await raw_history(stack.temporal_address, i))["events"]) for i in ids}
    for wf_id in ids:
        assert key_ids(await raw_history(stack.temporal_address, wf_id)) == {"key-a"}

    codec.write_key(keys, "key-b")  # rotation: a new key, made active; A stays to decode
    client_b = await connected("key-b")
    async with (
        build_worker(client_b, lb_config, driver=driver, kube=kube),
        service_starter(kube, client_b, lb_config, namespace, driver=driver),
    ):
        for name in names:  # a change each open workflow is signalled, runs and records
            await asyncio.to_thread(
                kube.patch,
                SERVICES,
                name,
                {"metadata": {"annotations": {ann.HEALTHCHECK_INTERVAL: "25"}}},
                namespace,
            )

        def changed(name: str) -> bool:
            elb = world.classic(name)
            return elb is not None and elb["HealthCheck"]["Interval"] == 25

        for service in services:
            lb = lb_name(service)
            await eventually(partial(changed, lb), what=f"{lb} changed under key B")
        for name in names:
            await asyncio.to_thread(kube.delete, SERVICES, name, namespace)

        async def closed(wf_id: str) -> bool:
            described = await client_b.get_workflow_handle(wf_id).describe()
            return described.close_time is not None

        for wf_id in ids:
            for _ in range(300):
                if await closed(wf_id):
                    break
                await asyncio.sleep(0.2)
            assert await closed(wf_id), f"{wf_id} did not complete"

    ring_b = codec.read_key_ring(keys, "key-b")
    for wf_id in ids:
        raw = await raw_history(stack.temporal_address, wf_id)
        assert key_ids(raw) == {"key-a", "key-b"}, wf_id
        later = {"events": raw["events"][before[wf_id] :]}
        assert key_ids(later) == {"key-b"}  # every payload since the switch
        decrypt_json(raw, ring_b)  # every old one still decodes
        with pytest.raises(codec.CodecError, match="'key-a'"):
            decrypt_json(raw, codec.KeyRing({"key-b": ring_b.keys["key-b"]}, "key-b"))
