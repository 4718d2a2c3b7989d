"""``cloudloop layout plan|apply|destroy`` as a user runs it: a bad document is refused with every
error before anything else; against the stack (the CLI a real process, the worker in this
one) apply prints each resource's step and the outputs, a second apply changes nothing, plan says
so, destroy removes it all; the results land in the cluster's Secrets when asked."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cloudloop import claim, temporal
from cloudloop.cli import main
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.messages.layout import LayoutResult, ModuleResult
from cloudloop.settings import TemporalSettings
from devstack.local import LocalStack
from starters.layout import publish
from tests.layouts.support import EXAMPLES, SECRET, cli, config_file, layout_worker

UUID = "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"


def test_a_bad_document_is_refused_with_every_error_before_anything_else(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / "aws-with-nat.yaml").read_text()))
    docs[1]["layout"] = "Everywhere"
    docs[1]["masterNodeGroup"]["replicas"] = 0
    docs[1]["existingVPCID"] = "vpc-1"
    docs[1]["provider"]["providerSecretAccessKey"] = SECRET
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    result = CliRunner().invoke(
        main,
        ["layout", "apply", "--config", str(path), "--temporal-address", "127.0.0.1:9"],
    )
    assert result.exit_code == 2, result.output
    for where in ("layout:", "masterNodeGroup.replicas:", "vpcNetworkCIDR:", "clusterUUID:"):
        assert where in result.output
    assert SECRET not in result.output


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {
            ("kube-system", "d8-provider-cluster-configuration"): {
                "data": {"cloud-provider-cluster-configuration.yaml": "eA=="}
            }
        }

    def get(self, resource: Any, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def create(self, resource: Any, obj: dict[str, Any], namespace: str = "") -> dict[str, Any]:
        self.objects[namespace, obj["metadata"]["name"]] = obj
        return obj

    def patch(self, resource: Any, name: str, patch: dict[str, Any], namespace: str) -> None:
        self.objects[namespace, name]["data"].update(patch["data"])


def test_publish_writes_the_discovery_data_and_the_data_device_paths() -> None:
    kube = FakeKube()
    result = LayoutResult(
        action="apply",
        layout="WithoutNAT",
        prefix="p",
        cloud_discovery_data={"kind": "AWSCloudDiscoveryData", "keyName": "p"},
        modules=[
            ModuleResult(
                module="master-0",
                steps=[],
                node_name="p-master-0",
                outputs={"kubernetes_data_device_path": "/dev/xvdf"},
            )
        ],
    )
    written = publish(kube, result)  # type: ignore[arg-type]
    assert written == [
        "kube-system/d8-provider-cluster-configuration",
        "d8-system/d8-masters-kubernetes-data-device-path",
    ]
    provider = kube.objects["kube-system", "d8-provider-cluster-configuration"]["data"]
    assert "cloud-provider-cluster-configuration.yaml" in provider  # other keys kept
    assert json.loads(base64.b64decode(provider["cloud-provider-discovery-data.json"])) == {
        "kind": "AWSCloudDiscoveryData",
        "keyName": "p",
    }
    devices = kube.objects["d8-system", "d8-masters-kubernetes-data-device-path"]["data"]
    assert base64.b64decode(devices["p-master-0"]) == b"/dev/xvdf"


@pytest.fixture
async def cli_queue(aws_stack: LocalStack) -> AsyncIterator[str]:
    """A task queue with a layout worker in this process (the CLI connects to it)."""
    queue = f"layout-cli-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        provider="aws",
        temporal=TemporalSettings(
            address=aws_stack.temporal_address, task_queue=queue, codec=aws_stack.codec
        ),
        aws=AwsSettings(endpoint_url=aws_stack.aws_endpoint, timeout_s=5, max_attempts=2),
    )
    client = await temporal.connect(settings.temporal)
    async with layout_worker(client, settings, queue):
        yield queue


@pytest.mark.stack
async def test_apply_reapply_plan_destroy_through_the_cli(
    aws_stack: LocalStack, cli_queue: str, tmp_path: Path
) -> None:
    prefix = f"c{uuid.uuid4().hex[:6]}"
    path = str(config_file(tmp_path, "aws-without-nat", prefix))
    common = ["--config", path, "--cluster-uuid", UUID]
    output = tmp_path / "outputs.json"

    code, out = await cli(aws_stack, cli_queue, "apply", *common, "--output", str(output))
    assert code == 0, out
    assert f"+ aws.vpc/{prefix} created" in out
    assert f"+ aws.instance/{prefix}-master-0 created" in out
    outputs = json.loads(output.read_text())
    assert outputs["cloud_discovery_data"]["keyName"] == prefix
    assert outputs["nodes"][f"{prefix}-master-0"]["kubernetes_data_device_path"] == "/dev/xvdf"
    assert SECRET not in out

    code, out = await cli(aws_stack, cli_queue, "apply", *common)
    assert code == 0, out
    assert f"= aws.vpc/{prefix} unchanged" in out and " created" not in out

    code, out = await cli(aws_stack, cli_queue, "plan", *common)
    assert code == 0, out
    assert "Plan: 0 to create, 0 to change, 0 to destroy" in out

    code, out = await cli(aws_stack, cli_queue, "plan", "--destroy", *common)
    assert code == 0, out
    assert (
        f"- aws.vpc/{prefix} (base)" in out
        and "0 to create, 0 to change, 23 to destroy, 0 unchanged" in out
    )

    code, out = await cli(aws_stack, cli_queue, "destroy", *common)
    assert code == 0, out
    assert f"- aws.vpc/{prefix} deleted" in out and "Destroy complete" in out

    code, out = await cli(aws_stack, cli_queue, "plan", *common)
    assert code == 0, out
    assert "0 to change, 0 to destroy, 0 unchanged" in out


def test_the_discoverer_reads_what_apply_writes() -> None:
    """The published ``cloud_discovery_data`` is what the discoverer merges live data into."""
    from cloudloop.cloud.aws.discovery import DISCOVERY_KIND
    from cloudloop.cloud.aws.layout import DISCOVERY_KIND as LAYOUT_KIND
    from cloudloop.cloud.models import DiscoveryData, Zone
    from cloudloop.rules import discovery as cloud_data

    assert LAYOUT_KIND == DISCOVERY_KIND
    written = {
        "apiVersion": "deckhouse.io/v1",
        "kind": LAYOUT_KIND,
        "keyName": "p",
        "instances": {"ami": "ami-1", "additionalSecurityGroups": ["sg-1"]},
        "loadBalancerSecurityGroup": "sg-2",
        "zones": ["us-east-1a"],
        "zoneToSubnetIdMap": {"us-east-1a": "subnet-1"},
    }
    kube = FakeKube()
    result = LayoutResult(
        action="apply", layout="WithNAT", prefix="p", cloud_discovery_data=written
    )
    publish(kube, result)  # type: ignore[arg-type]
    raw = kube.objects["kube-system", cloud_data.PROVIDER_CONFIGURATION_SECRET]["data"]
    base = cloud_data.parse_provider_document(
        base64.b64decode(raw[cloud_data.PROVIDER_DISCOVERY_KEY]).decode()
    )
    live = DiscoveryData(
        region="us-east-1", zones=[Zone(name="us-east-1a", region="us-east-1")], kind=DISCOVERY_KIND
    )
    merged = cloud_data.discovery_document(base, live)
    assert merged == written


def test_adopt_refuses_an_unreadable_state_before_anything_else(tmp_path: Path) -> None:
    path = config_file(tmp_path, "aws-without-nat", "demo")
    bad = tmp_path / "state.json"
    bad.write_text("{not json")
    for source, message in (
        (str(tmp_path / "absent.json"), "absent.json"),
        (str(bad), "not JSON"),
        ("cluster", "needs --kubeconfig"),
    ):
        result = CliRunner().invoke(
            main,
            [
                "layout",
                "adopt",
                "--config",
                str(path),
                "--cluster-uuid",
                UUID,
                "--state",
                source,
                "--temporal-address",
                "127.0.0.1:9",
            ],
        )
        assert result.exit_code == 1, result.output
        assert message in result.output


def faked_layout_run(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The layout CLI with Temporal faked: the inputs it would start, listed."""
    import starters.layout
    from cloudloop.cli import layout as cli_module

    seen: list[Any] = []

    async def fake_connect(_: Any) -> None:
        return None

    async def no_claim(*_: Any) -> None:
        return None

    async def fake_run(client: Any, queue: str, input: Any, **_: Any) -> LayoutResult:
        seen.append(input)
        return LayoutResult(action=input.action, layout=input.cluster.prefix, prefix="p")

    def leave(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(temporal, "connect", fake_connect)
    monkeypatch.setattr(claim, "refuse_if_claimed_elsewhere", no_claim)  # Temporal is faked
    monkeypatch.setattr(starters.layout, "run_layout", fake_run)
    monkeypatch.setattr(cli_module, "leave", leave)
    return seen


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), ""),
        (("--kubeconfig", "k.yaml"), "RESOLVED"),
        (("--kubeconfig", "k.yaml", "--worker-kubeconfig-path", "/etc/k"), "/etc/k"),
    ],
    ids=["without", "kubeconfig", "worker-path"],
)
@pytest.mark.usefixtures("codec_keys")
def test_destroy_hands_the_kubeconfigs_path_to_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], expected: str
) -> None:
    """Only the path goes into the workflow's input (the workers read it); none, no phase."""
    seen = faked_layout_run(monkeypatch)
    monkeypatch.chdir(tmp_path)
    path = config_file(tmp_path, "aws-without-nat", "clitest")
    result = CliRunner().invoke(
        main,
        ["layout", "destroy", "--config", str(path), "--cluster-uuid", str(uuid.uuid4()), *flags],
    )
    assert result.exit_code == 0, result.output
    want = str((tmp_path / "k.yaml").resolve()) if expected == "RESOLVED" else expected
    assert seen[0].kubeconfig == want


@pytest.mark.usefixtures("codec_keys")
def test_cloud_config_hands_only_file_names_to_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--cloud-config [SELECTOR=]FILE``: a local file by its absolute path, any other name as
    the workers' (under their mount), every name as given when the workers read their own files
    (``--worker-config-path``); the bytes never; a selector given twice is refused."""
    seen = faked_layout_run(monkeypatch)
    monkeypatch.chdir(tmp_path)
    path = config_file(tmp_path, "aws-without-nat", "clitest")
    (tmp_path / "boot.yaml").write_text("#cloud-config\nsecret: s3cr3t\n")
    base = ["layout", "plan", "--config", str(path), "--cluster-uuid", UUID]
    result = CliRunner().invoke(
        main, [*base, "--cloud-config", "master=boot.yaml", "--cloud-config", "nodes/all.yaml"]
    )
    assert result.exit_code == 0, result.output
    assert seen[0].source.cloud_config == {
        "master": str((tmp_path / "boot.yaml").resolve()),
        "": "nodes/all.yaml",
    }
    assert "s3cr3t" not in seen[0].model_dump_json()

    elsewhere = CliRunner().invoke(
        main, [*base, "--worker-config-path", "c.yaml", "--cloud-config", "master=boot.yaml"]
    )
    assert elsewhere.exit_code == 0, elsewhere.output
    assert seen[1].source.cloud_config == {"master": "boot.yaml"}  # the workers' own boot.yaml

    twice = CliRunner().invoke(
        main, [*base, "--cloud-config", "master=boot.yaml", "--cloud-config", "master=x"]
    )
    assert twice.exit_code == 2 and "master is given twice" in twice.output
    assert len(seen) == 2
