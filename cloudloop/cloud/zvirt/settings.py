"""The zVirt section of the settings (``CLOUDLOOP_ZVIRT__*``): engine URL, credentials, waits.

The password comes from a mounted file (wins) or a SecretStr; it never prints. Waits are bounded
per driver call, so a long engine operation resumes in the next call instead of blocking.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr


class ZvirtSettings(BaseModel):
    """zVirt / oVirt Engine API access (the ``provider`` parameters of cloud-provider-zvirt)."""

    #: a refused setting is named, never printed (its value may be a credential)
    model_config = ConfigDict(hide_input_in_errors=True)

    #: The engine's API, e.g. ``https://zvirt.example.com/ovirt-engine/api``.
    api_url: str = ""
    username: str = "admin@internal"
    password: SecretStr | None = None
    #: A file holding the password (mounted from a Secret); wins over ``password``.
    password_file: Path | None = None
    #: Skip TLS verification of the engine (Deckhouse ``insecure``).
    insecure: bool = False
    #: PEM file with the engine's CA (Deckhouse ``caBundle``); the system store when unset.
    ca_bundle: Path | None = None
    #: The zVirt cluster VMs are created in (Deckhouse ``clusterID``).
    cluster_id: str = ""
    #: SSH key published in the registration Secret (Deckhouse ``sshPublicKey``).
    ssh_public_key: str = ""
    #: Per-request timeout; an engine that does not answer is an error, never "not found".
    timeout_s: float = 30.0
    #: How long one driver call waits for the engine (clone, disk resize, shutdown, removal)
    #: before it returns or raises a retryable error; the next call resumes where it stopped.
    wait_timeout_s: float = 300.0
    #: How often a waiting driver call polls the engine.
    poll_interval_s: float = 2.0
    #: How long a graceful shutdown may take before a deleted VM is powered off.
    shutdown_timeout_s: float = 60.0

    def password_value(self) -> str:
        if self.password_file is not None:
            return self.password_file.read_text().strip()
        return self.password.get_secret_value() if self.password is not None else ""
