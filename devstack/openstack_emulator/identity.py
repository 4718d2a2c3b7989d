"""Keystone v3: version discovery, password and application-credential tokens, the catalog.

Follows the Identity API v3 reference: ``POST /v3/auth/tokens`` answers 201 with the token in
``X-Subject-Token`` and a body carrying ``expires_at``, the project, roles and the service catalog
(one entry per service type, endpoints per interface with ``region_id``/``region``). Tokens expire
on the cloud clock and can all be revoked from the admin API, so clients must re-authenticate.

As strict as Keystone 30 (checked against it by ``tests/openstack/test_openstack_keystone.py``):
- Two domains are seeded: ``Default`` with the main user and project, and a second one
  (``IdentityOptions.second_domain``) with a user and a project of its own; each user has a role
  on its project only. A user or project by name needs its domain (by id or by name), else 400
  "Expecting to find domain in user/project"; an unknown user, a wrong password, an unknown
  project or one without a role assignment are 401.
- A password request without a scope answers an **unscoped** token: no project, roles or
  catalog (the seeded users have no default project); ``GET /v3/auth/catalog`` with it is 403.
- Two regions: every service has public/internal/admin endpoints in ``region`` and in
  ``region_two``; the second region's URLs carry the path prefix ``/<region_two>`` on the same
  listeners (the server strips it and records the region), so a client must pick by
  ``region_name``. Both regions serve the same state (a real second region has its own).
- Application credentials (by id, or by name with the user by id or by name and domain) give a
  token scoped to the credential's project; they cannot ask for a scope. One per seeded user is
  made at start when a secret is given; more through the API, with a project-scoped token.
Departures: domain- and system-scoped tokens, trusts and users' default projects are not
emulated (401/400); the second region's services are the first one's.
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
    #: Every seeded user's password.
    password: str = field(default="secret", repr=False)
    project_name: str = "demo"
    region: str = "RegionOne"
    #: The second region: the same services again, under the URL prefix ``/<region_two>``.
    region_two: str = "RegionTwo"
    #: The second domain, with a user and a project of its own (as Deckhouse tenants often are).
    second_domain: str = "tenants"
    second_username: str = "deployer"
    second_project_name: str = "kube"
    #: An application credential per seeded user created at start (named ``seeded``).
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

    @property
    def second_domain_id(self) -> str:
        return _hex_id("domain", self.second_domain)

    @property
    def second_user_id(self) -> str:
        return _hex_id("user", f"{self.second_domain}/{self.second_username}")

    @property
    def second_project_id(self) -> str:
        return _hex_id("project", f"{self.second_domain}/{self.second_project_name}")

    @property
    def second_application_credential_id(self) -> str:
        return _hex_id("application_credential", f"{self.second_user_id}/seeded")

    @property
    def regions(self) -> tuple[str, ...]:
        return (self.region, self.region_two) if self.region_two else (self.region,)


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
        self.tokens: dict[str, Token] = {}
        self.app_credentials: dict[str, dict[str, Any]] = {}
        self.domains: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.projects: dict[str, dict[str, Any]] = {}
        #: (user id, project id) → role names.
        self.assignments: dict[tuple[str, str], tuple[str, ...]] = {}
        self._add_domain(DEFAULT_DOMAIN_ID, DEFAULT_DOMAIN_NAME)
        self._add_domain(options.second_domain_id, options.second_domain)
        seeded = (
            (
                DEFAULT_DOMAIN_ID,
                options.user_id,
                options.username,
                options.project_id,
                options.project_name,
                options.application_credential_id,
            ),
            (
                options.second_domain_id,
                options.second_user_id,
                options.second_username,
                options.second_project_id,
                options.second_project_name,
                options.second_application_credential_id,
            ),
        )
        for domain_id, user_id, username, project_id, project_name, credential_id in seeded:
            self.users[user_id] = {
                "id": user_id,
                "name": username,
                "domain_id": domain_id,
                "password": options.password,
            }
            self.projects[project_id] = {
                "id": project_id,
                "name": project_name,
                "domain_id": domain_id,
            }
            self.assignments[(user_id, project_id)] = ("member", "reader")
            if options.application_credential_secret:
                self._add_app_credential(
                    credential_id,
                    "seeded",
                    options.application_credential_secret,
                    user_id=user_id,
                    project_id=project_id,
                )

    def _add_domain(self, domain_id: str, name: str) -> None:
        self.domains[domain_id] = {"id": domain_id, "name": name, "enabled": True}

    @property
    def password(self) -> str:
        """The main user's password."""
        return str(self.users[self.options.user_id]["password"])

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

    # -- regions ---------------------------------------------------------------------------
    def region_prefixes(self) -> dict[str, str]:
        """URL path prefix → region, for every region but the first (served on the same ports)."""
        return {f"/{region}": region for region in self.options.regions[1:]}

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
        """The main user's new password."""
        self.users[self.options.user_id]["password"] = password

    def issue_token(self, request: Request) -> Reply:
        auth = request.json_body("auth")
        identity = auth.get("identity")
        if not isinstance(identity, dict):
            raise bad_request("Expecting to find identity in auth.")
        methods = identity.get("methods") or []
        scope = auth.get("scope")
        if scope is not None and not isinstance(scope, dict):
            raise bad_request("Invalid scope.")
        if "password" in methods:
            user = self._password_user(identity.get("password") or {})
            token = self._scoped_token(user, scope, methods=("password",))
        elif "application_credential" in methods:
            if scope:
                raise _unauthorized("Application credentials cannot request a scope.")
            token = self._app_credential_token(identity.get("application_credential") or {})
        elif "token" in methods:
            existing = self.authenticate(str((identity.get("token") or {}).get("id", "")))
            if existing is None:
                raise _unauthorized()
            if existing.application_credential_id:
                raise _unauthorized("Application credential tokens cannot be rescoped.")
            token = self._scoped_token(self.users[existing.user_id], scope, methods=("token",))
        else:
            raise _unauthorized(f"Unsupported authentication methods: {methods}")
        return Reply(201, {"token": self._render_token(token)}, {"X-Subject-Token": token.id})

    def _domain(self, ref: Any, owner: str) -> dict[str, Any] | None:
        """The domain ``{"id"}`` or ``{"name"}`` names; 400 when ``ref`` names none."""
        if not isinstance(ref, dict) or not (ref.get("id") or ref.get("name")):
            raise bad_request(f"Expecting to find domain in {owner}.")
        return next(
            (
                d
                for d in self.domains.values()
                if (ref.get("id") and d["id"] == ref["id"])
                or (not ref.get("id") and d["name"] == ref.get("name"))
            ),
            None,
        )

    def _user(self, ref: Any) -> dict[str, Any] | None:
        """The user ``{"id"}`` or ``{"name", "domain"}`` names."""
        if not isinstance(ref, dict):
            raise bad_request("Expecting to find user in password.")
        if ref.get("id"):
            return self.users.get(str(ref["id"]))
        if not ref.get("name"):
            raise bad_request("Expecting to find id or name in user.")
        domain = self._domain(ref.get("domain"), "user")
        if domain is None:
            return None
        return next(
            (
                u
                for u in self.users.values()
                if u["name"] == ref["name"] and u["domain_id"] == domain["id"]
            ),
            None,
        )

    def _password_user(self, password: dict[str, Any]) -> dict[str, Any]:
        ref = password.get("user")
        user = self._user(ref)
        if user is None or not isinstance(ref, dict) or ref.get("password") != user["password"]:
            raise _unauthorized()
        return user

    def _scoped_token(
        self, user: dict[str, Any], scope: dict[str, Any] | None, *, methods: tuple[str, ...]
    ) -> Token:
        """A token for ``user``: unscoped without a scope, else for a project it has a role on."""
        if not scope:
            return self._new_token(user, None, methods=methods)
        if "project" not in scope:
            raise _unauthorized("Only project scopes are emulated (not domain or system).")
        ref = scope["project"]
        if not isinstance(ref, dict):
            raise bad_request("Expecting to find id or name in project.")
        project: dict[str, Any] | None = None
        if ref.get("id"):
            project = self.projects.get(str(ref["id"]))
        elif ref.get("name"):
            domain = self._domain(ref.get("domain"), "project")
            project = next(
                (
                    p
                    for p in self.projects.values()
                    if domain is not None
                    and p["name"] == ref["name"]
                    and p["domain_id"] == domain["id"]
                ),
                None,
            )
        else:
            raise bad_request("Expecting to find id or name in project.")
        if project is None or (user["id"], project["id"]) not in self.assignments:
            raise _unauthorized()
        return self._new_token(user, project, methods=methods)

    def _app_credential_token(self, credential: dict[str, Any]) -> Token:
        found: dict[str, Any] | None = None
        if credential.get("id"):
            found = self.app_credentials.get(str(credential["id"]))
        elif credential.get("name"):
            user = self._user(credential.get("user") or {})
            found = next(
                (
                    c
                    for c in self.app_credentials.values()
                    if user is not None
                    and c["user_id"] == user["id"]
                    and c["name"] == credential["name"]
                ),
                None,
            )
        else:
            raise bad_request("Expecting to find id or name in application_credential.")
        secret = str(credential.get("secret", ""))
        if found is None or _digest(secret) != found["secret_digest"]:
            raise _unauthorized()
        return self._new_token(
            self.users[found["user_id"]],
            self.projects[found["project_id"]],
            methods=("application_credential",),
            app_credential_id=found["id"],
            roles=tuple(r["name"] for r in found["roles"]),
        )

    def _new_token(
        self,
        user: dict[str, Any],
        project: dict[str, Any] | None,
        *,
        methods: tuple[str, ...],
        app_credential_id: str = "",
        roles: tuple[str, ...] | None = None,
    ) -> Token:
        if roles is None:
            roles = self.assignments.get((user["id"], project["id"]), ()) if project else ()
        token = Token(
            id="gAAAAA" + secrets.token_urlsafe(120),
            user_id=user["id"],
            user_name=user["name"],
            project_id=project["id"] if project else "",
            project_name=project["name"] if project else "",
            domain_id=user["domain_id"],
            expires_at=self.cloud.clock() + self.options.token_ttl_s,
            methods=methods,
            roles=roles,
            application_credential_id=app_credential_id,
        )
        self.tokens[token.id] = token
        return token

    def _domain_ref(self, domain_id: str) -> dict[str, str]:
        return {"id": domain_id, "name": str(self.domains[domain_id]["name"])}

    def _render_token(self, token: Token) -> dict[str, Any]:
        expires = datetime.now(UTC) + timedelta(seconds=token.expires_at - self.cloud.clock())
        body: dict[str, Any] = {
            "methods": list(token.methods),
            "user": {
                "domain": self._domain_ref(token.domain_id),
                "id": token.user_id,
                "name": token.user_name,
                "password_expires_at": None,
            },
            "audit_ids": [secrets.token_urlsafe(16)],
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
            "issued_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
        }
        if not token.project_id:  # unscoped: Keystone adds no project, roles or catalog
            return body
        project = self.projects[token.project_id]
        body.update(
            {
                "project": {
                    "domain": self._domain_ref(project["domain_id"]),
                    "id": token.project_id,
                    "name": token.project_name,
                },
                "is_domain": False,
                "roles": [{"id": _hex_id("role", name), "name": name} for name in token.roles],
                "catalog": self.catalog(token.project_id),
            }
        )
        if token.application_credential_id:
            credential = self.app_credentials[token.application_credential_id]
            body["application_credential"] = {
                "id": credential["id"],
                "name": credential["name"],
                "restricted": not credential["unrestricted"],
            }
        return body

    def catalog(self, project_id: str) -> list[dict[str, Any]]:
        """The service catalog: per service type one entry, three interfaces in each region."""
        names = {
            "identity": "keystone",
            "compute": "nova",
            "network": "neutron",
            "load-balancer": "octavia",
            "block-storage": "cinder",
            "volumev3": "cinderv3",
            "image": "glance",
        }
        prefixes = {region: prefix for prefix, region in self.region_prefixes().items()}
        entries: list[dict[str, Any]] = []
        for service_type, name in names.items():
            root = self.endpoints.get(
                "block-storage" if service_type == "volumev3" else service_type
            )
            if root is None:
                continue
            path = {
                "identity": "/v3",
                "compute": "/v2.1",
                "block-storage": f"/v3/{project_id}",
                "volumev3": f"/v3/{project_id}",
            }.get(service_type, "")
            entries.append(
                {
                    "type": service_type,
                    "name": name,
                    "id": _hex_id("service", service_type),
                    "endpoints": [
                        {
                            "id": _hex_id("endpoint", f"{service_type}/{region}/{interface}"),
                            "interface": interface,
                            "region_id": region,
                            "region": region,
                            "url": f"{root}{prefixes.get(region, '')}{path}",
                        }
                        for region in self.options.regions
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
        if not request.project_id:
            raise ApiFault(403, "You are not authorized to perform the requested action.")
        return Reply(200, {"catalog": self.catalog(request.project_id), "links": {}})

    def list_projects(self, request: Request) -> Reply:
        assert request.token is not None
        user_id = request.token.user_id
        projects = [
            {
                "id": p["id"],
                "name": p["name"],
                "domain_id": p["domain_id"],
                "enabled": True,
                "is_domain": False,
                "parent_id": p["domain_id"],
            }
            for p in self.projects.values()
            if (user_id, p["id"]) in self.assignments
        ]
        return Reply(200, {"projects": projects, "links": {"self": None, "next": None}})

    def list_regions(self, request: Request) -> Reply:
        regions = [
            {"id": region, "description": "", "parent_region_id": None}
            for region in self.options.regions
        ]
        return Reply(200, {"regions": regions, "links": {"self": None, "next": None}})

    # -- application credentials -----------------------------------------------------------
    def _add_app_credential(
        self,
        credential_id: str,
        name: str,
        secret: str,
        *,
        user_id: str,
        project_id: str,
        description: str = "",
        unrestricted: bool = False,
    ) -> dict[str, Any]:
        credential = {
            "id": credential_id,
            "name": name,
            "description": description,
            "project_id": project_id,
            "user_id": user_id,
            "expires_at": None,
            "unrestricted": unrestricted,
            "roles": [
                {"id": _hex_id("role", role), "name": role, "domain_id": None}
                for role in self.assignments.get((user_id, project_id), ())
            ],
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
        found = [self._public(c) for c in self.app_credentials.values() if c["user_id"] == user_id]
        return Reply(200, {"application_credentials": found, "links": {"next": None}})

    def create_app_credential(self, request: Request, user_id: str) -> Reply:
        self._own_user(request, user_id)
        if not request.project_id:
            raise bad_request("An application credential needs a project-scoped token.")
        body = request.json_body("application_credential")
        name = str(body.get("name") or "")
        if not name:
            raise bad_request("'name' is a required property")
        if any(
            c["name"] == name and c["user_id"] == user_id for c in self.app_credentials.values()
        ):
            raise ApiFault(409, f"Duplicate application credential name {name}.", "Conflict")
        secret = str(body.get("secret") or secrets.token_urlsafe(48))
        credential = self._add_app_credential(
            secrets.token_hex(16),
            name,
            secret,
            user_id=user_id,
            project_id=request.project_id,
            description=str(body.get("description") or ""),
            unrestricted=bool(body.get("unrestricted", False)),
        )
        return Reply(
            201, {"application_credential": {**self._public(credential), "secret": secret}}
        )

    def get_app_credential(self, request: Request, user_id: str, credential_id: str) -> Reply:
        self._own_user(request, user_id)
        credential = self.app_credentials.get(credential_id)
        if credential is None or credential["user_id"] != user_id:
            raise ApiFault(404, f"Could not find Application Credential: {credential_id}.")
        return Reply(200, {"application_credential": self._public(credential)})

    def delete_app_credential(self, request: Request, user_id: str, credential_id: str) -> Reply:
        self._own_user(request, user_id)
        credential = self.app_credentials.get(credential_id)
        if credential is None or credential["user_id"] != user_id:
            raise ApiFault(404, f"Could not find Application Credential: {credential_id}.")
        del self.app_credentials[credential_id]
        self.tokens = {
            k: t for k, t in self.tokens.items() if t.application_credential_id != credential_id
        }
        return Reply(204)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
