"""An apply's results land where the cluster reads them, on the real kube-apiserver: the
discovery data and the provider document in ``kube-system/d8-provider-cluster-configuration``,
the data device paths, and the state Secrets in dhctl's format (``d8-cluster-terraform-state``,
``d8-node-terraform-state-<node>`` with its keys and labels) — which the adoption path reads
back onto the same resources (from the cluster and from one named Secret)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cloudloop.cloud.aws import layout as defs
from cloudloop.cloud.aws.layout_state import STATE_TYPES
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import SECRETS, Resource
from cloudloop.layouts import tfstate
from cloudloop.layouts.config import load_documents
from cloudloop.messages.layout import LayoutResult, ModuleResult, StepResult
from cloudloop.rules import discovery as cloud_data
from devstack.kube import KubeOptions
from devstack.local import LocalStack, StackOptions
from starters.layout import publish, state_records

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)

pytestmark = pytest.mark.stack


def _data(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    secret = kube.get(SECRETS, name, namespace)
    assert secret is not None, f"{namespace}/{name}"
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_results_and_state_secrets_land_in_the_cluster_and_read_back(kube: Kube) -> None:
    try:
        kube.create(NAMESPACES, {"metadata": {"name": "d8-system"}})
    except KubeError as exc:
        if not exc.conflict:
            raise
    text = (EXAMPLES / "aws-without-nat.yaml").read_text()
    loaded = load_documents(
        list(yaml.safe_load_all(text)), uuid="3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"
    )
    layout = defs.define(loaded.document, loaded.cluster, ["us-east-1a", "us-east-1b"])
    ids = {
        r.key: r.name if r.kind in (defs.ROLE, defs.PROFILE, defs.KEY_PAIR) else f"id-{i}"
        for i, r in enumerate(r for m in layout.modules for r in m.resources)
    }
    result = LayoutResult(
        action="apply",
        layout=layout.layout,
        prefix=layout.prefix,
        cloud_discovery_data={"kind": "AWSCloudDiscoveryData", "keyName": layout.prefix},
        modules=[
            ModuleResult(
                module=m.id,
                node_name=m.node_name,
                steps=[
                    StepResult(key=r.key, action="created", outputs={"id": ids[r.key]})
                    for r in m.resources
                ],
                outputs={"kubernetes_data_device_path": "/dev/xvdf"}
                if m.module == "master-node"
                else {},
            )
            for m in layout.modules
        ],
    )
    document = yaml.safe_dump(loaded.document.model_dump(mode="json"))
    for _ in range(2):  # a second publish rewrites the same Secrets
        written = publish(kube, result, state_types=STATE_TYPES, provider_document=document)
    p = layout.prefix
    assert written == [
        "kube-system/d8-provider-cluster-configuration",
        "d8-system/d8-masters-kubernetes-data-device-path",
        "d8-system/d8-cluster-terraform-state",
        f"d8-system/d8-node-terraform-state-{p}-master-0",
        f"d8-system/d8-node-terraform-state-{p}-front-0",
    ]
    provider = _data(kube, "kube-system", cloud_data.PROVIDER_CONFIGURATION_SECRET)
    assert json.loads(provider[cloud_data.PROVIDER_DISCOVERY_KEY])["keyName"] == p
    assert yaml.safe_load(provider["cloud-provider-cluster-configuration.yaml"])["layout"] == (
        "WithoutNAT"
    )
    devices = _data(kube, "d8-system", "d8-masters-kubernetes-data-device-path")
    assert devices[f"{p}-master-0"] == "/dev/xvdf"  # other clusters' keys may be there too
    node = kube.get(SECRETS, f"d8-node-terraform-state-{p}-front-0", "d8-system")
    assert node is not None
    assert node["metadata"]["labels"] == {
        tfstate.NODE_GROUP_LABEL: "front",
        tfstate.NODE_NAME_LABEL: f"{p}-front-0",
        tfstate.STATE_LABEL: "",
    }
    node_data = _data(kube, "d8-system", f"d8-node-terraform-state-{p}-front-0")
    assert json.loads(node_data[tfstate.NODE_GROUP_SETTINGS_KEY]) == {"name": "front"}
    assert json.loads(node_data[tfstate.NODE_STATE_KEY])["version"] == 4

    # the adoption path reads them back onto the same resources
    records = state_records(["cluster"], STATE_TYPES, kube)
    placed = tfstate.map_state(layout, records, STATE_TYPES)
    assert placed.unmapped == []
    assert placed.ids == {k: v for k, v in ids.items() if not k.startswith(defs.SG_RULES)}
    one = state_records(
        [f"secret:d8-system/d8-node-terraform-state-{p}-master-0"], STATE_TYPES, kube
    )
    assert {r.scope for r in one} == {f"{p}-master-0"}
    assert tfstate.map_state(layout, one, STATE_TYPES).ids == {
        r.key: ids[r.key] for r in layout.module("master-0").resources
    }
    for name in written[2:]:
        kube.delete(SECRETS, name.split("/")[1], "d8-system")


def test_the_cluster_uuid_config_map_is_made_once_and_never_changed(kube: Kube) -> None:
    """dhctl's ``kube-system/d8-cluster-uuid`` (what ``layout destroy --kubeconfig`` checks):
    made when the cluster has none, an existing one kept as it is."""
    config_maps = Resource("", "v1", "configmaps", "ConfigMap")
    if kube.get(config_maps, "d8-cluster-uuid", "kube-system") is not None:
        kube.delete(config_maps, "d8-cluster-uuid", "kube-system")
    result = LayoutResult(action="apply", layout="WithoutNAT", prefix="uuid-test")

    assert publish(kube, result, cluster_uuid="uuid-one") == ["kube-system/d8-cluster-uuid"]
    assert publish(kube, result, cluster_uuid="uuid-two") == []
    made = kube.get(config_maps, "d8-cluster-uuid", "kube-system")
    assert made is not None
    assert made["data"] == {"cluster-uuid": "uuid-one"}
    kube.delete(config_maps, "d8-cluster-uuid", "kube-system")  # the stack is shared


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A fresh control plane (etcd and kube-apiserver only): no ``d8-system`` yet, as before
    dhctl's bootstrap."""
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("bare"),
            temporal=False,
            moto=False,
            kube=(KubeOptions(name="bare"),),
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def test_apply_with_a_kubeconfig_makes_d8_system_when_the_cluster_has_none(
    bare_cluster: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dhctl creates ``d8-system`` during bootstrap, so a cluster an apply publishes into before
    that has none: ``layout apply --kubeconfig`` makes it and writes everything (it exited 1
    after writing the ``kube-system`` objects). The workflow's run is faked; the CLI, publish and
    the kube-apiserver are real."""
    import starters.layout
    from cloudloop import claim, temporal
    from cloudloop.cli import layout as cli_module
    from cloudloop.cli import main
    from cloudloop.kube.client import api_client
    from tests.layouts.support import config_file

    stack = bare_cluster
    kube = Kube(api_client(stack.kubeconfig))
    assert kube.get(NAMESPACES, "d8-system") is None
    prefix = "nsless"
    result = LayoutResult(
        action="apply",
        layout="WithoutNAT",
        prefix=prefix,
        cloud_discovery_data={"kind": "AWSCloudDiscoveryData", "keyName": prefix},
        modules=[
            ModuleResult(
                module="master-0",
                node_name=f"{prefix}-master-0",
                steps=[StepResult(key="aws.instance/m", action="created", outputs={"id": "i-1"})],
                outputs={"kubernetes_data_device_path": "/dev/xvdf"},
            )
        ],
    )

    async def fake_connect(_: Any) -> None:
        return None

    async def no_claim(*_: Any) -> None:
        return None

    async def fake_run(*_: Any, **__: Any) -> LayoutResult:
        return result

    def leave(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(temporal, "connect", fake_connect)
    monkeypatch.setattr(claim, "refuse_if_claimed_elsewhere", no_claim)  # Temporal is faked
    monkeypatch.setattr(starters.layout, "run_layout", fake_run)
    monkeypatch.setattr(cli_module, "leave", leave)
    path = config_file(tmp_path, "aws-without-nat", prefix)
    answer = CliRunner().invoke(
        main,
        [
            "layout",
            "apply",
            "--config",
            str(path),
            "--cluster-uuid",
            "9a0c4a52-3f0e-4d3b-a3c4-2f1e0d9c8b7a",
            "--kubeconfig",
            str(stack.kubeconfig),
        ],
        env={"CLOUDLOOP_TEMPORAL__CODEC__ENABLED": "false"},  # Temporal is faked: no history
    )
    assert answer.exit_code == 0, answer.output
    assert "written: Secret d8-system/d8-masters-kubernetes-data-device-path" in answer.output
    assert f"written: Secret d8-system/d8-node-terraform-state-{prefix}-master-0" in answer.output
    assert _data(kube, "d8-system", "d8-masters-kubernetes-data-device-path") == {
        f"{prefix}-master-0": "/dev/xvdf"
    }
    assert "written: ConfigMap kube-system/d8-cluster-uuid" in answer.output
