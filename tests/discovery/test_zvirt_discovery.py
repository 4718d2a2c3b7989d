"""ZvirtCloudProviderDiscoveryData: storage domains shaped as Deckhouse's discoverer does."""

from __future__ import annotations

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.driver import Capability, part_or_unsupported
from cloudloop.cloud.zvirt.driver import ZvirtDriver
from cloudloop.cloud.zvirt.mapping import (
    StorageDomainView,
    discovery_document,
    storage_domain_enabled,
    storage_domains,
)
from cloudloop.cloud.zvirt.settings import ZvirtSettings


@pytest.mark.parametrize(
    ("status", "external", "enabled"),
    [
        pytest.param("active", "ok", True, id="active"),
        pytest.param("active", "failure", True, id="active-despite-external"),
        pytest.param(None, "ok", True, id="attached-no-status-external-ok"),
        pytest.param("", "ok", True, id="empty-status-external-ok"),
        pytest.param(None, "failure", False, id="no-status-external-failure"),
        pytest.param(None, None, False, id="nothing-known"),
        pytest.param("maintenance", "ok", False, id="maintenance"),
        pytest.param("unattached", "ok", False, id="unattached"),
        pytest.param("inactive", "ok", False, id="inactive"),
    ],
)
def test_enabled_rule(status: str | None, external: str | None, enabled: bool) -> None:
    assert storage_domain_enabled(StorageDomainView("sd", status, external)) is enabled


def test_sorted_by_name_first_is_default_spelled_as_the_schema() -> None:
    shaped = storage_domains(
        [
            StorageDomainView("zeta", "active", "ok"),
            StorageDomainView("alpha", None, "failure"),
            StorageDomainView("mid", None, "ok"),
        ]
    )
    assert shaped == [
        {"name": "alpha", "isEnabled": False, "isDefaul": True},
        {"name": "mid", "isEnabled": True, "isDefaul": False},
        {"name": "zeta", "isEnabled": True, "isDefaul": False},
    ]
    assert all("IsDefault" not in entry for entry in shaped)


def test_no_domains_no_default() -> None:
    assert storage_domains([]) == []


def test_the_whole_document() -> None:
    assert discovery_document([StorageDomainView("data", "active", "ok")]) == {
        "apiVersion": "deckhouse.io/v1",
        "kind": "ZvirtCloudProviderDiscoveryData",
        "storageDomains": [{"name": "data", "isEnabled": True, "isDefaul": True}],
    }


def test_zones_and_capabilities_need_no_engine() -> None:
    driver = ZvirtDriver(ZvirtSettings())  # no URL: any engine request would fail
    assert [(z.name, z.region) for z in driver.discovery.zones()] == [("default", "default")]
    assert {c.value for c in driver.capabilities} == {
        "instances",
        "machines",
        "discovery",
        "volumes",
    }
    with pytest.raises(errors.NotSupported):
        driver.discovery.instance_types()
    with pytest.raises(errors.NotSupported):
        driver.discovery.list_cluster_disks("c")
    with pytest.raises(errors.NotSupported):
        # no routes: a consumer is given the stand-in, whose every operation refuses
        part_or_unsupported(driver.routes, driver.provider, Capability.ROUTES).list_routes("c")
    with pytest.raises(errors.InvalidRequest, match="api_url"):
        driver.discovery.discovery_data()
