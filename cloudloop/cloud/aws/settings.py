"""The AWS section of the settings (``CLOUDLOOP_AWS__*``): region, endpoint and credentials.

Credentials come from a mounted shared-credentials file, the standard chain, or SecretStr values;
they never print. A cloud that does not answer within ``timeout_s`` is an error, never "gone".
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, SecretStr


class AwsSettings(BaseModel):
    region: str = "us-east-1"
    #: Emulator or VPC endpoint; unset means the real AWS endpoints.
    endpoint_url: str | None = None
    #: An AWS shared-credentials file (mounted from a Secret); the standard chain when unset.
    credentials_file: Path | None = None
    profile: str | None = None
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    #: Per-request connect/read timeout; a cloud that does not answer is an error, never "gone".
    timeout_s: float = 10.0
    max_attempts: int = 3
