"""The product's ``cloud.conf`` → connection path against a real Keystone and against the emulator.

Every test runs twice: on Keystone 30.0.0 from PyPI (:mod:`devstack.keystone`, sqlite) and on the
emulator's identity service, with the same account: a user and a project in a second domain, an
application credential, two regions. The assertions are the same, so the emulator's answers are
checked against Keystone's (token scope, catalog presence, regions, errors): a shape check.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from keystoneauth1 import exceptions as ksa_exc
from keystoneauth1 import session as ksa_session

from cloudloop.cloud import errors
from cloudloop.cloud.openstack.base import ConnectionScope
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.settings import OpenStackSettings
from devstack.keystone import keystone
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from tests.openstack.support import quick_settings

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class Account:
    """What both backends seed: a second domain's user, project and application credential."""

    backend: str
    auth_url: str
    regions: tuple[str, ...]
    domain: str
    domain_id: str
    username: str
    password: str = field(repr=False)
    project: str
    project_id: str
    app_credential_id: str
    app_credential_name: str
    app_credential_secret: str = field(repr=False)
    #: The emulator's admin API (request counts); empty for Keystone.
    admin_url: str = ""


def _emulator_account(endpoint: OpenStackEmulatorEndpoint) -> Account:
    return Account(
        backend="emulator",
        auth_url=endpoint.auth_url,
        regions=(endpoint.region, endpoint.region_two),
        domain=endpoint.second_domain,
        domain_id=endpoint.second_domain_id,
        username=endpoint.second_username,
        password=endpoint.password,
        project=endpoint.second_project,
        project_id=endpoint.second_project_id,
        app_credential_id=endpoint.second_app_credential_id,
        app_credential_name="seeded",
        app_credential_secret=endpoint.app_credential_secret,
        admin_url=endpoint.admin_url,
    )


@pytest.fixture(scope="module", params=["emulator", "keystone"])
def account(request: pytest.FixtureRequest) -> Iterator[Account]:
    if request.param == "emulator":
        yield _emulator_account(request.getfixturevalue("endpoint"))
        return
    with keystone() as running:
        yield Account(
            backend="keystone",
            auth_url=running.auth_url,
            regions=running.regions,
            domain=running.domain,
            domain_id=running.domain_id,
            username=running.username,
            password=running.password,
            project=running.project,
            project_id=running.project_id,
            app_credential_id=running.app_credential_id,
            app_credential_name=running.app_credential_name,
            app_credential_secret=running.app_credential_secret,
        )


def connect_as(tmp_path: Path, account: Account, **global_: str) -> ConnectionScope:
    """The driver made from a ``cloud.conf`` whose ``[Global]`` is ``global_`` (auth-url and
    region added), asked whom it logs in as."""
    values = {"auth-url": account.auth_url, "region": account.regions[0], **global_}
    conf = tmp_path / "cloud.conf"
    conf.write_text(
        "[Global]\n" + "".join(f'{k.replace("_", "-")} = "{v}"\n' for k, v in values.items())
    )
    driver = OpenStackDriver(OpenStackSettings(cloud_config_file=conf, request_timeout_s=10))
    try:
        return driver.session.connection_scope()
    finally:
        driver.close()


def password_login(account: Account, **extra: str) -> dict[str, str]:
    return {"username": account.username, "password": account.password, **extra}


def test_password_and_project_by_name_in_a_second_domain(tmp_path: Path, account: Account) -> None:
    scope = connect_as(
        tmp_path, account, **password_login(account, domain_name=account.domain, tenant_name="kube")
    )
    assert (scope.project_id, scope.project_name) == (account.project_id, account.project)
    assert (scope.project_domain_id, scope.project_domain_name) == (
        account.domain_id,
        account.domain,
    )
    assert scope.application_credential_id == ""
    assert set(account.regions) <= set(scope.catalog_regions)
    # The same login in the second region reaches that region's endpoints.
    elsewhere = connect_as(
        tmp_path,
        account,
        region=account.regions[1],
        **password_login(account, domain_id=account.domain_id, tenant_name=account.project),
    )
    assert elsewhere.project_id == account.project_id
    assert elsewhere.compute_url != scope.compute_url


def test_project_by_id(tmp_path: Path, account: Account) -> None:
    scope = connect_as(
        tmp_path,
        account,
        **password_login(account, user_domain_name=account.domain, tenant_id=account.project_id),
    )
    assert (scope.project_id, scope.project_domain_name) == (account.project_id, account.domain)


def test_application_credential_by_id_and_by_name(tmp_path: Path, account: Account) -> None:
    by_id = connect_as(
        tmp_path,
        account,
        application_credential_id=account.app_credential_id,
        application_credential_secret=account.app_credential_secret,
    )
    assert by_id.project_id == account.project_id
    assert by_id.application_credential_id == account.app_credential_id
    by_name = connect_as(
        tmp_path,
        account,
        username=account.username,
        domain_name=account.domain,
        application_credential_name=account.app_credential_name,
        application_credential_secret=account.app_credential_secret,
    )
    assert by_name.project_id == account.project_id
    assert by_name.application_credential_id == account.app_credential_id


def test_an_unknown_region_is_an_invalid_request(tmp_path: Path, account: Account) -> None:
    with pytest.raises(errors.InvalidRequest) as raised:
        connect_as(
            tmp_path,
            account,
            region="RegionX",
            **password_login(account, domain_name=account.domain, tenant_name=account.project),
        )
    assert "'RegionX'" in str(raised.value) and "'compute'" in str(raised.value)


def test_no_tenant_is_refused_before_any_request(tmp_path: Path, account: Account) -> None:
    before = _token_requests(account)
    with pytest.raises(errors.InvalidRequest, match="tenant-id or tenant-name is required"):
        connect_as(tmp_path, account, **password_login(account, domain_name=account.domain))
    assert _token_requests(account) == before


def test_a_wrong_password_is_an_auth_failure(tmp_path: Path, account: Account) -> None:
    with pytest.raises(errors.CloudAuthFailed):
        connect_as(
            tmp_path,
            account,
            username=account.username,
            password="wrong",
            domain_name=account.domain,
            tenant_name=account.project,
        )


def _token_requests(account: Account) -> int | None:
    """Token requests the emulator has seen (Keystone's are not counted)."""
    if not account.admin_url:
        return None
    return sum(
        1
        for r in OpenStackEmulatorAdmin(account.admin_url).requests()
        if r["service"] == "identity" and r["route"] == "/v3/auth/tokens"
    )


# -- the Identity API's shapes, as keystoneauth sees them ------------------------------------
def _tokens(account: Account, auth: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = ksa_session.Session(timeout=10).post(
        f"{account.auth_url}/auth/tokens", json={"auth": auth}, raise_exc=False
    )
    return response.status_code, response.json()


def _password(account: Account, **user: Any) -> dict[str, Any]:
    return {
        "methods": ["password"],
        "password": {"user": {"name": account.username, "password": account.password, **user}},
    }


def test_token_shapes(account: Account) -> None:
    domain = {"id": account.domain_id}
    status, unscoped = _tokens(account, {"identity": _password(account, domain=domain)})
    assert status == 201
    assert set(unscoped["token"]) == {"methods", "user", "audit_ids", "expires_at", "issued_at"}
    assert unscoped["token"]["user"]["domain"] == {"id": account.domain_id, "name": account.domain}

    project = {"name": account.project, "domain": {"name": account.domain}}
    status, scoped = _tokens(
        account,
        {"identity": _password(account, domain=domain), "scope": {"project": project}},
    )
    assert status == 201
    token = scoped["token"]
    assert {"project", "roles", "catalog", "is_domain"} <= set(token)
    assert token["project"] == {
        "id": account.project_id,
        "name": account.project,
        "domain": {"id": account.domain_id, "name": account.domain},
    }
    assert "member" in {r["name"] for r in token["roles"]}
    regions = {e["region_id"] for entry in token["catalog"] for e in entry["endpoints"]}
    assert regions == set(account.regions)
    for entry in token["catalog"]:
        assert {"id", "type", "name", "endpoints"} <= set(entry)
        for e in entry["endpoints"]:
            assert {"id", "interface", "region_id", "region", "url"} <= set(e)

    status, credential = _tokens(
        account,
        {
            "identity": {
                "methods": ["application_credential"],
                "application_credential": {
                    "name": account.app_credential_name,
                    "secret": account.app_credential_secret,
                    "user": {"name": account.username, "domain": {"name": account.domain}},
                },
            }
        },
    )
    assert status == 201
    assert credential["token"]["project"]["id"] == account.project_id
    assert credential["token"]["application_credential"]["id"] == account.app_credential_id
    assert credential["token"]["catalog"]


@pytest.mark.parametrize(
    ("auth", "status"),
    [
        pytest.param(lambda a: {"identity": _password(a)}, 400, id="user-name-without-domain"),
        pytest.param(
            lambda a: {
                "identity": _password(a, domain={"id": a.domain_id}),
                "scope": {"project": {"name": a.project}},
            },
            400,
            id="project-name-without-domain",
        ),
        pytest.param(
            lambda a: {"identity": _password(a, domain={"name": "Default"})},
            401,
            id="user-in-another-domain",
        ),
        pytest.param(
            lambda a: {
                "identity": _password(a, domain={"id": a.domain_id}),
                "scope": {"project": {"name": a.project, "domain": {"id": "default"}}},
            },
            401,
            id="project-in-another-domain",
        ),
    ],
)
def test_refusals(account: Account, auth: Any, status: int) -> None:
    answered, body = _tokens(account, auth(account))
    assert answered == status
    assert body["error"]["code"] == status


def test_an_unscoped_token_gets_no_catalog(account: Account) -> None:
    session = ksa_session.Session(timeout=10)
    answer = session.post(
        f"{account.auth_url}/auth/tokens",
        json={"auth": {"identity": _password(account, domain={"id": account.domain_id})}},
    )
    token = answer.headers["X-Subject-Token"]
    with pytest.raises(ksa_exc.Forbidden):
        session.get(f"{account.auth_url}/auth/catalog", headers={"X-Auth-Token": token})


# -- the emulator's second region ------------------------------------------------------------
def test_the_emulator_serves_the_second_region(
    endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> None:
    driver = OpenStackDriver(quick_settings(endpoint, region=endpoint.region_two))
    try:
        assert {z.region for z in driver.discovery.zones()} == {endpoint.region_two}
    finally:
        driver.close()
    compute = [r for r in admin.requests() if r["service"] == "compute"]
    assert compute and {r["region"] for r in compute} == {endpoint.region_two}


def test_the_driver_s_first_call_names_an_unknown_region(
    endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> None:
    driver = OpenStackDriver(quick_settings(endpoint, region="RegionX"))
    try:
        with pytest.raises(errors.InvalidRequest) as raised:
            driver.discovery.zones()
    finally:
        driver.close()
    assert "region 'RegionX'" in str(raised.value) and "'compute'" in str(raised.value)


def test_the_driver_refuses_a_password_login_without_a_tenant(
    endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> None:
    admin.clear_requests()
    driver = OpenStackDriver(quick_settings(endpoint, tenant_name=""))
    try:
        with pytest.raises(errors.InvalidRequest, match=r"\[Global\] tenant-id or tenant-name"):
            driver.discovery.zones()
    finally:
        driver.close()
    assert admin.requests() == []
