"""Each CAPI provider publishes the node manager's registration Secrets under Deckhouse's names."""

from __future__ import annotations

import base64

import pytest

from cloudloop.cloud.registry import PROVIDERS
from cloudloop.settings import Settings


@pytest.mark.parametrize(
    "provider", [pytest.param(p, id=p) for p, r in PROVIDERS.items() if r.registration]
)
def test_registration_secrets_per_provider(provider: str) -> None:
    record = PROVIDERS[provider]
    assert record.registration is not None
    bodies = record.registration(record.section(Settings()))
    names = [b["metadata"]["name"] for b in bodies]
    assert names == ["d8-node-manager-cloud-provider", f"d8-node-manager-cloud-provider-{provider}"]
    assert all(b["metadata"]["namespace"] == "kube-system" for b in bodies)
    assert base64.b64decode(bodies[0]["data"]["type"]).decode() == provider


@pytest.mark.parametrize(
    "provider", [pytest.param(p, id=p) for p, r in PROVIDERS.items() if r.node_templates]
)
def test_registration_publishes_the_machine_template_contract(provider: str) -> None:
    """The starter writes ``d8-cloud-provider-<name>-capi`` (key ``template.yaml``) beside the
    registration Secrets; its template renders the kinds the registration announces."""
    from types import SimpleNamespace
    from typing import Any, cast

    from cloudloop.nodegroup.contract import Contract
    from starters.registration import CloudProviderRegistration

    settings = Settings().model_copy(update={"provider": provider})
    context = cast(Any, SimpleNamespace(settings=settings, kube=None))
    registration = CloudProviderRegistration.from_context(context)
    assert registration is not None
    bodies = {b["metadata"]["name"]: b for b in registration.secrets()}
    capi = bodies[f"d8-cloud-provider-{provider}-capi"]
    labels = capi["metadata"]["labels"]
    assert labels["cloud-provider.deckhouse.io/ephemeral-nodes-templates"] == "capi"
    assert labels["cloud-provider.deckhouse.io/name"] == provider
    contract = Contract.parse(base64.b64decode(capi["data"]["template.yaml"]).decode())
    data = {
        k: base64.b64decode(v).decode()
        for k, v in bodies["d8-node-manager-cloud-provider"]["data"].items()
    }
    record = PROVIDERS[provider]
    assert record.node_templates is not None
    assert data["instanceClassKind"] == record.node_templates.instance_class.kind
    rendered = contract.template.source
    assert data["capiMachineTemplateKind"] in rendered
    assert data["capiMachineTemplateAPIVersion"] in rendered
