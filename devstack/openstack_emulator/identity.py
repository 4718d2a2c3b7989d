"""Keystone v3: version discovery, password and application-credential tokens, the catalog.

Follows the Identity API v3 reference: ``POST /v3/auth/tokens`` answers 201 with the token in
``X-Subject-Token`` and a body carrying ``expires_at``, the project, roles and the service catalog
(one entry per service type, endpoints per interface with ``region_id``/``region``). Tokens expire
on the cloud clock and can all be revoked from the admin API, so clients must re-authenticate.
One domain (``Default``), one project and one user are seeded; application credentials are
created through the API (``POST /v3/users/{id}/application_credentials``) or seeded.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from devstack.openstack_emulator.api import ID, Reply, Request, Route, Service, Token
from devstack.openstack_emulator.cloud import ApiFault, Cloud, bad_request, iso_now, seed_id

DEFAULT_DOMAIN_ID = "default"
DEFAULT_DOMAIN_NAME = "Default"
IDENTITY_VERSION = "v3.14"


def _hex_id(kind: str, name: str) -> str:
    return seed_id(kind, name).replace("-", "")


@dataclass(frozen=True)
class IdentityOptions:
    """The seeded account: who may log in, to which project, in which region."""

    username: str = "demo"
    password: str = field(default="secret", repr=False)
    project_name: str = "demo"
    region: str = "RegionOne"
    #: An application credential created at start (id, secret), e.g. for settings files.
    application_credential_secret: str = field(default="", repr=False)
    token_ttl_s: float = 3600.0

    @property
    def user_id(self) -> str:
        return _hex_id("user", self.username)

    @property
    def project_id(self) -> str:
        return _hex_id("project", self.project_name)

    @property
    def application_credential_id(self) -> str:
        return _hex_id("application_credential", f"{self.username}/seeded")


def _unauthorized(message: str = "The request you have made requires authentication.") -> ApiFault:
    return ApiFault(401, message, "Unauthorized")


class Identity(Service):
    type = "identity"
    microversion_service = ""
    max_limit = 0

    def __init__(self, cloud: Cloud, options: IdentityOptions) -> None:
        self.options = options
        #: Service type → root URL, filled in by the server once every port is bound.
        self.endpoints: dict[str, str] = {}
        super().__init__(cloud)
        self.reset()

    def reset(self) -> None:
        options = self.options
        self.password = options.password
        self.tokens: dict[str, Token] = {}
        self.app_credentials: dict[str, dict[str, Any]] = {}
        if options.application_credential_secret:
            self._add_app_credential(
                options.application_credential_id,
                "seeded",
                options.application_credential_secret,
            )

    def fault_body(self, fault: ApiFault) -> Any:
        titles = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}
        return {
            "error": {
                "code": fault.status,
                "message": fault.message,
                "title": fault.kind or titles.get(fault.status, "Error"),
            }
        }

    def routes(self) -> list[Route]:
        return [
            Route("GET", "", self.versions, public=True),
            Route("GET", "/v3", self.version, public=True),
            Route("POST", "/v3/auth/tokens", self.issue_token, public=True),
            Route("GET", "/v3/auth/tokens", self.validate_token),
            Route("DELETE", "/v3/auth/tokens", self.revoke_token),
            Route("GET", "/v3/auth/catalog", self.get_catalog),
            Route("GET", "/v3/auth/projects", self.list_projects),
            Route("GET", "/v3/regions", self.list_regions),
            Route("GET", f"/v3/users/{ID}/application_credentials", self.list_app_credentials),
            Route("POST", f"/v3/users/{ID}/application_credentials", self.create_app_credential),
            Route("GET", f"/v3/users/{ID}/application_credentials/{ID}", self.get_app_credential),
            Route(
                "DELETE",
                f"/v3/users/{ID}/application_credentials/{ID}",
                self.delete_app_credential,
            ),
        ]

    # -- version discovery -----------------------------------------------------------------
    def _version_document(self, request: Request) -> dict[str, Any]:
        return {
            "id": IDENTITY_VERSION,
            "status": "stable",
            "updated": "2020-04-07T00:00:00Z",
            "links": [{"rel": "self", "href": f"{request.base_url}/v3/"}],
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}
            ],
        }

    def versions(self, request: Request) -> Reply:
        return Reply(300, {"versions": {"values": [self._version_document(request)]}})

    def version(self, request: Request) -> Reply:
        return Reply(200, {"version": self._version_document(request)})

    # -- tokens ----------------------------------------------------------------------------
    def authenticate(self, token_id: str) -> Token | None:
        """The live token ``token_id`` (services call this for ``X-Auth-Token``)."""
        token = self.tokens.get(token_id)
        if token is None or token.expires_at <= self.cloud.clock():
            return None
        return token

    def revoke_all(self) -> None:
        self.tokens.clear()

    def set_password(self, password: str) -> None:
        self.password = password

    def issue_token(self, request: Request) -> Reply:
        auth = request.json_body("auth")
        identity = auth.get("identity")
        if not isinstance(identity, dict):
            raise bad_request("Expecting to find identity in auth.")
        methods = identity.get("methods") or []
        if "password" in methods:
            token = self._password_token(identity.get("password") or {}, auth.get("scope"))
        elif "application_credential" in methods:
            if auth.get("scope"):
                raise _unauthorized("Application credentials cannot request a scope.")
            token = self._app_credential_token(identity.get("application_credential") or {})
        elif "token" in methods:
            existing = self.authenticate(str((identity.get("token") or {}).get("id", "")))
            if existing is None:
                raise _unauthorized()
            token = self._new_token(methods=("token",), app_credential_id="")
        else:
            raise _unauthorized(f"Unsupported authentication methods: {methods}")
        return Reply(201, {"token": self._render_token(token)}, {"X-Subject-Token": token.id})

    def _password_token(self, password: dict[str, Any], scope: Any) -> Token:
        user = password.get("user") or {}
        options = self.options
        by_id = user.get("id") == options.user_id
        domain = user.get("domain") or {}
        by_name = user.get("name") == options.username and (
            domain.get("id") == DEFAULT_DOMAIN_ID or domain.get("name") == DEFAULT_DOMAIN_NAME
        )
        if not (by_id or by_name) or user.get("password") != self.password:
            raise _unauthorized()
        if scope is not None:
            project = (scope or {}).get("project") or {}
            project_domain = project.get("domain") or {}
            matches = project.get("id") == options.project_id or (
                project.get("name") == options.project_name
                and (
                    project_domain.get("id") == DEFAULT_DOMAIN_ID
                    or project_domain.get("name") == DEFAULT_DOMAIN_NAME
                )
            )
            if not matches:
                raise _unauthorized(
                    "User has no access to project "
                    f"{project.get('name') or project.get('id') or '?'}"
                )
        return self._new_token(methods=("password",), app_credential_id="")

    def _app_credential_token(self, credential: dict[str, Any]) -> Token:
        found: dict[str, Any] | None = None
        if credential.get("id"):
            found = self.app_credentials.get(str(credential["id"]))
        elif credential.get("name"):
            user = credential.get("user") or {}
            if user.get("id") == self.options.user_id or user.get("name") == self.options.username:
                found = next(
                    (c for c in self.app_credentials.values() if c["name"] == credential["name"]),
                    None,
                )
        secret = str(credential.get("secret", ""))
        if found is None or _digest(secret) != found["secret_digest"]:
            raise _unauthorized()
        return self._new_token(methods=("application_credential",), app_credential_id=found["id"])

    def _new_token(self, *, methods: tuple[str, ...], app_credential_id: str) -> Token:
        options = self.options
        token = Token(
            id="gAAAAA" + secrets.token_urlsafe(120),
            user_id=options.user_id,
            user_name=options.username,
            project_id=options.project_id,
            project_name=options.project_name,
            domain_id=DEFAULT_DOMAIN_ID,
            expires_at=self.cloud.clock() + options.token_ttl_s,
            methods=methods,
            application_credential_id=app_credential_id,
        )
        self.tokens[token.id] = token
        return token

    def _render_token(self, token: Token) -> dict[str, Any]:
        expires = datetime.now(UTC) + timedelta(seconds=token.expires_at - self.cloud.clock())
        domain = {"id": DEFAULT_DOMAIN_ID, "name": DEFAULT_DOMAIN_NAME}
        body: dict[str, Any] = {
            "methods": list(token.methods),
            "user": {
                "domain": domain,
                "id": token.user_id,
                "name": token.user_name,
                "password_expires_at": None,
            },
            "audit_ids": [secrets.token_urlsafe(16)],
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
            "issued_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
            "project": {"domain": domain, "id": token.project_id, "name": token.project_name},
            "is_domain": False,
            "roles": [{"id": _hex_id("role", name), "name": name} for name in token.roles],
            "catalog": self.catalog(token.project_id),
        }
        if token.application_credential_id:
            credential = self.app_credentials[token.application_credential_id]
            body["application_credential"] = {
                "id": credential["id"],
                "name": credential["name"],
                "restricted": not credential["unrestricted"],
            }
        return body

    def catalog(self, project_id: str) -> list[dict[str, Any]]:
        """The service catalog: per service type one entry, three interfaces in the region."""
        region = self.options.region
        names = {
            "identity": "keystone",
            "compute": "nova",
            "network": "neutron",
            "load-balancer": "octavia",
            "block-storage": "cinder",
            "volumev3": "cinderv3",
            "image": "glance",
        }
        entries: list[dict[str, Any]] = []
        for service_type, name in names.items():
            root = self.endpoints.get(
                "block-storage" if service_type == "volumev3" else service_type
            )
            if root is None:
                continue
            url = {
                "identity": f"{root}/v3",
                "compute": f"{root}/v2.1",
                "block-storage": f"{root}/v3/{project_id}",
                "volumev3": f"{root}/v3/{project_id}",
            }.get(service_type, root)
            entries.append(
                {
                    "type": service_type,
                    "name": name,
                    "id": _hex_id("service", service_type),
                    "endpoints": [
                        {
                            "id": _hex_id("endpoint", f"{service_type}/{interface}"),
                            "interface": interface,
                            "region_id": region,
                            "region": region,
                            "url": url,
                        }
                        for interface in ("public", "internal", "admin")
                    ],
                }
            )
        return entries

    def _subject(self, request: Request) -> Token:
        subject = next(
            (v for k, v in request.headers.items() if k.lower() == "x-subject-token"), ""
        )
        token = self.authenticate(subject)
        if token is None:
            raise ApiFault(404, f"Could not find token: {subject[:8]}...", "Not Found")
        return token

    def validate_token(self, request: Request) -> Reply:
        token = self._subject(request)
        return Reply(200, {"token": self._render_token(token)}, {"X-Subject-Token": token.id})

    def revoke_token(self, request: Request) -> Reply:
        token = self._subject(request)
        self.tokens.pop(token.id, None)
        return Reply(204)

    def get_catalog(self, request: Request) -> Reply:
        return Reply(200, {"catalog": self.catalog(request.project_id), "links": {}})

    def list_projects(self, request: Request) -> Reply:
        options = self.options
        project = {
            "id": options.project_id,
            "name": options.project_name,
            "domain_id": DEFAULT_DOMAIN_ID,
            "enabled": True,
            "is_domain": False,
            "parent_id": DEFAULT_DOMAIN_ID,
        }
        return Reply(200, {"projects": [project], "links": {"self": None, "next": None}})

    def list_regions(self, request: Request) -> Reply:
        region = {"id": self.options.region, "description": "", "parent_region_id": None}
        return Reply(200, {"regions": [region], "links": {"self": None, "next": None}})

    # -- application credentials -----------------------------------------------------------
    def _add_app_credential(
        self,
        credential_id: str,
        name: str,
        secret: str,
        *,
        description: str = "",
        unrestricted: bool = False,
    ) -> dict[str, Any]:
        credential = {
            "id": credential_id,
            "name": name,
            "description": description,
            "project_id": self.options.project_id,
            "user_id": self.options.user_id,
            "expires_at": None,
            "unrestricted": unrestricted,
            "roles": [{"id": _hex_id("role", "member"), "name": "member", "domain_id": None}],
            "secret_digest": _digest(secret),
            "created_at": iso_now(),
        }
        self.app_credentials[credential_id] = credential
        return credential

    def _own_user(self, request: Request, user_id: str) -> None:
        assert request.token is not None
        if user_id != request.token.user_id:
            raise ApiFault(403, "You are not authorized to perform the requested action.")
        if request.token.application_credential_id:
            credential = self.app_credentials.get(request.token.application_credential_id)
            if credential is not None and not credential["unrestricted"]:
                raise ApiFault(
                    403,
                    "Using method 'application_credential' is not allowed for managing "
                    "additional application credentials.",
                )

    @staticmethod
    def _public(credential: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in credential.items() if k != "secret_digest"}

    def list_app_credentials(self, request: Request, user_id: str) -> Reply:
        self._own_user(request, user_id)
        found = [self._public(c) for c in self.app_credentials.values()]
        return Reply(200, {"application_credentials": found, "links": {"next": None}})

    def create_app_credential(self, request: Request, user_id: str) -> Reply:
        self._own_user(request, user_id)
        body = request.json_body("application_credential")
        name = str(body.get("name") or "")
        if not name:
            raise bad_request("'name' is a required property")
        if any(c["name"] == name for c in self.app_credentials.values()):
            raise ApiFault(409, f"Duplicate application credential name {name}.", "Conflict")
        secret = str(body.get("secret") or secrets.token_urlsafe(48))
        credential = self._add_app_credential(
            secrets.token_hex(16),
            name,
            secret,
            description=str(body.get("description") or ""),
            unrestricted=bool(body.get("unrestricted", False)),
        )
        return Reply(
            201, {"application_credential": {**self._public(credential), "secret": secret}}
        )

    def get_app_credential(self, request: Request, user_id: str, credential_id: str) -> Reply:
        self._own_user(request, user_id)
        credential = self.app_credentials.get(credential_id)
        if credential is None:
            raise ApiFault(404, f"Could not find Application Credential: {credential_id}.")
        return Reply(200, {"application_credential": self._public(credential)})

    def delete_app_credential(self, request: Request, user_id: str, credential_id: str) -> Reply:
        self._own_user(request, user_id)
        if self.app_credentials.pop(credential_id, None) is None:
            raise ApiFault(404, f"Could not find Application Credential: {credential_id}.")
        self.tokens = {
            k: t for k, t in self.tokens.items() if t.application_credential_id != credential_id
        }
        return Reply(204)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
