"""The payload codec: every Temporal payload encrypted with AES-256-GCM under a key ring.

A payload (workflow and activity inputs and results, signals, updates, queries, memo, heartbeat
details, summaries, and failure messages and stack traces through the failure converter's
encoded attributes) is serialized whole (its proto bytes, metadata included) and encrypted; the
stored payload is ``encoding: binary/encrypted``, ``encryption-key-id: <id>``, data = a 12-byte
random nonce followed by the ciphertext and its tag (Temporal's encryption sample's format, so
its codec servers and tools read it too). Search attributes are not payloads the codec sees:
they stay readable, as the Temporal UI finds workflows by them.

Rules:
- The key ring is read once, at start, from the files of one directory (a mounted Secret); one
  key is active for encoding, every key decodes. A bad key file, an unknown active key or no key
  at all is a :class:`CodecConfigError` naming the file or id, never a key's bytes.
- Decoding a payload not marked ``binary/encrypted`` returns it as it is: histories written
  before the codec was turned on still replay. Decoding under an unknown key id is a
  :class:`CodecError` naming the id only; a payload that does not authenticate is one too.
- The codec gives confidentiality, not integrity against whoever runs Temporal (they can
  terminate, reset or replay a history); see docs/decisions/payload-codec.md.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverter, PayloadCodec

from cloudloop.settings import CodecSettings

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
KEY_BYTES = 32
#: What a key file may be named (a Secret's data key, without the leading dots of its links).
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: The environment a process's key directory and active key are named in (``cloudloop dev``).
KEY_DIR_ENV = "CLOUDLOOP_TEMPORAL__CODEC__KEY_DIR"
ACTIVE_KEY_ENV = "CLOUDLOOP_TEMPORAL__CODEC__ACTIVE_KEY_ID"
ENABLED_ENV = "CLOUDLOOP_TEMPORAL__CODEC__ENABLED"


class CodecConfigError(ValueError):
    """The codec is on but its keys cannot be used (missing, malformed, no active one)."""


class CodecError(ValueError):
    """A payload could not be decoded (unknown key id, or it does not authenticate)."""


@dataclasses.dataclass(frozen=True)
class KeyRing:
    """Keys by id, and the one new payloads are encrypted with."""

    keys: Mapping[str, bytes]
    active: str

    def __post_init__(self) -> None:
        if self.active not in self.keys:
            raise CodecConfigError(f"active key {self.active!r} is not one of the key ring's")
        for key_id, key in self.keys.items():
            if len(key) != KEY_BYTES:
                raise CodecConfigError(f"key {key_id!r} is not {KEY_BYTES} bytes")

    def __repr__(self) -> str:  # never the keys
        return f"KeyRing(ids={sorted(self.keys)}, active={self.active!r})"

    @classmethod
    def generate(cls, key_id: str = "dev") -> KeyRing:
        """A ring of one fresh random key (tests)."""
        return cls({key_id: secrets.token_bytes(KEY_BYTES)}, key_id)

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.keys[self.active]).encrypt(nonce, payload.SerializeToString(), None)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID: self.active.encode()}, data=nonce + sealed
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        key = self.keys.get(key_id)
        if key is None:
            raise CodecError(f"payload encrypted with key {key_id!r}, which is not in the key ring")
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            plain = AESGCM(key).decrypt(nonce, sealed, None)
        except InvalidTag:
            raise CodecError(f"payload under key {key_id!r} does not authenticate") from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded


class EncryptionCodec(PayloadCodec):
    """:class:`PayloadCodec` over a :class:`KeyRing` (pure CPU: no I/O, nothing awaited)."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.ring.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.ring.decrypt(p) for p in payloads]


class EncodedFailureConverter(DefaultFailureConverter):
    """Failure messages and stack traces go into the (encrypted) encoded attributes: an error's
    text carries the IDs and names of what failed."""

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=True)


def read_key_ring(directory: Path, active: str = "") -> KeyRing:
    """The keys of ``directory`` (one file a key, base64 of 32 bytes), ``active`` encoding."""
    if not directory.is_dir():
        raise CodecConfigError(f"codec key directory {directory} does not exist")
    keys: dict[str, bytes] = {}
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or not path.is_file():  # a Secret volume's ..data links
            continue
        if not KEY_ID_PATTERN.fullmatch(path.name):
            raise CodecConfigError(f"codec key file {path}: not a key id (letters, digits, ._-)")
        try:
            key = base64.b64decode(path.read_bytes().strip(), validate=True)
        except (binascii.Error, ValueError):
            raise CodecConfigError(f"codec key file {path}: not base64") from None
        if len(key) != KEY_BYTES:
            raise CodecConfigError(f"codec key file {path}: {len(key)} bytes, not {KEY_BYTES}")
        keys[path.name] = key
    if not keys:
        raise CodecConfigError(f"codec key directory {directory} holds no key")
    if not active:
        if len(keys) > 1:
            raise CodecConfigError(
                f"codec key directory {directory} holds {len(keys)} keys "
                f"({', '.join(keys)}): name the active one (temporal.codec.active_key_id)"
            )
        active = next(iter(keys))
    if active not in keys:
        raise CodecConfigError(
            f"active codec key {active!r} is not in {directory} (keys: {', '.join(keys)})"
        )
    return KeyRing(keys, active)


def key_ring(settings: CodecSettings) -> KeyRing | None:
    """The configured key ring; ``None`` with the codec off. Refuses the codec on without keys."""
    if not settings.enabled:
        return None
    if settings.key_dir is None:
        raise CodecConfigError(
            "the Temporal payload codec is on but no key is configured: set "
            f"{KEY_DIR_ENV} to a directory of key files (the Helm chart mounts its codec "
            f"Secret there), or {ENABLED_ENV}=false to keep histories in plaintext"
        )
    return read_key_ring(settings.key_dir, settings.active_key_id)


def data_converter(ring: KeyRing | None) -> DataConverter:
    """The pydantic converter, with the codec and encoded failure attributes when ``ring``."""
    if ring is None:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(ring),
        failure_converter_class=EncodedFailureConverter,
    )


def process_env(settings: CodecSettings) -> dict[str, str]:
    """``settings`` as the environment of a child process (``CLOUDLOOP_TEMPORAL__CODEC__*``)."""
    env = {ENABLED_ENV: "true" if settings.enabled else "false"}
    if settings.key_dir is not None:
        env[KEY_DIR_ENV] = str(settings.key_dir)
    if settings.active_key_id:
        env[ACTIVE_KEY_ENV] = settings.active_key_id
    return env


def write_key(directory: Path, key_id: str) -> Path:
    """A new random key file ``directory/key_id`` (mode 0600), for the dev and test stacks."""
    if not KEY_ID_PATTERN.fullmatch(key_id):
        raise CodecConfigError(f"{key_id!r} is not a key id")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / key_id
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(base64.b64encode(secrets.token_bytes(KEY_BYTES)) + b"\n")
    return path
