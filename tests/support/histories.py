"""Workflow histories as the server stores them, and decrypted with a client's codec keys.

:func:`plain_json` is how a test reads what a history's payloads say (a secret that must not be
there, an ID that must): the server holds them encrypted (:mod:`cloudloop.codec`), so a check on
the raw form alone would pass for nothing. :func:`raw_without_search_attributes` is the raw form
minus the one part meant to stay readable.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory

from cloudloop.codec import ENCODING, EncryptionCodec, KeyRing

ENCRYPTED = base64.b64encode(ENCODING).decode()


def ring_of(client: Client) -> KeyRing:
    """The key ring of a client made by :func:`cloudloop.temporal.connect`."""
    codec = client.data_converter.payload_codec
    assert isinstance(codec, EncryptionCodec), f"{client} has no encryption codec"
    return codec.ring


def is_payload(node: Any) -> bool:
    return isinstance(node, dict) and isinstance(node.get("metadata"), dict) and "data" in node


def encrypted(node: Any) -> bool:
    return is_payload(node) and node["metadata"].get("encoding") == ENCRYPTED


def decrypt_json(node: Any, ring: KeyRing) -> Any:
    """``node`` (a history's JSON form, or part of it) with every encrypted payload decrypted."""
    if encrypted(node):
        payload = ring.decrypt(json_format.ParseDict(node, Payload()))
        return json_format.MessageToDict(payload)
    if isinstance(node, dict):
        return {k: decrypt_json(v, ring) for k, v in node.items()}
    if isinstance(node, list):
        return [decrypt_json(v, ring) for v in node]
    return node


#: Marker details the SDK's core writes and reads itself, never through the codec: a patch's
#: ID and a local activity's bookkeeping (its ``result`` is the workflow's payload, encrypted).
CORE_MARKER_DETAILS = frozenset({"patch-data", "data"})


def encrypt_json(node: Any, ring: KeyRing) -> Any:
    """``node`` with every payload encrypted under ``ring``'s active key, as a worker with the
    codec on writes them (the core's own marker details stay as they are)."""
    if isinstance(node, dict) and "markerName" in node and "details" in node:
        details = {
            k: v if k in CORE_MARKER_DETAILS else encrypt_json(v, ring)
            for k, v in node["details"].items()
        }
        return {**node, "details": details}
    if is_payload(node) and not encrypted(node):
        payload = ring.encrypt(json_format.ParseDict(node, Payload()))
        return json_format.MessageToDict(payload)
    if isinstance(node, dict):
        return {k: encrypt_json(v, ring) for k, v in node.items()}
    if isinstance(node, list):
        return [encrypt_json(v, ring) for v in node]
    return node


def plain_json(history: WorkflowHistory, client: Client) -> dict[str, Any]:
    """``history`` in JSON form with its payloads decrypted by ``client``'s keys."""
    decrypted: dict[str, Any] = decrypt_json(history.to_json_dict(), ring_of(client))
    return decrypted


def payloads_of(node: Any) -> list[dict[str, Any]]:
    """Every payload (JSON form) under ``node``."""
    if is_payload(node):
        return [node]
    if isinstance(node, dict):
        return [p for v in node.values() for p in payloads_of(v)]
    if isinstance(node, list):
        return [p for v in node for p in payloads_of(v)]
    return []


def without_search_attributes(node: Any) -> Any:
    """``node`` without its ``searchAttributes`` (readable on purpose: the UI finds by them)."""
    if isinstance(node, dict):
        return {k: without_search_attributes(v) for k, v in node.items() if k != "searchAttributes"}
    if isinstance(node, list):
        return [without_search_attributes(v) for v in node]
    return node


def user_payloads(node: Any) -> list[dict[str, Any]]:
    """The payloads under ``node`` the codec encrypts: all but the search attributes and the
    SDK core's own marker details (:data:`CORE_MARKER_DETAILS`)."""
    if isinstance(node, dict) and "markerName" in node and "details" in node:
        return [
            p
            for k, v in node["details"].items()
            if k not in CORE_MARKER_DETAILS
            for p in payloads_of(v)
        ]
    if is_payload(node):
        return [node]
    if isinstance(node, dict):
        return [p for k, v in node.items() if k != "searchAttributes" for p in user_payloads(v)]
    if isinstance(node, list):
        return [p for v in node for p in user_payloads(v)]
    return []


def paths_containing(node: Any, text: str, path: str = "") -> list[str]:
    """Where ``text`` occurs in ``node`` (JSON paths), to say which field leaked it."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in paths_containing(v, text, f"{path}.{k}")]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in paths_containing(v, text, f"{path}[{i}]")]
    return [path] if text in str(node) else []


#: What a history shows on purpose, never encrypted: the search attributes and workflow IDs
#: (the UI lists and finds runs by them; the IDs are the idempotency keys, see
#: docs/decisions/payload-codec.md).
VISIBLE = frozenset({"searchAttributes", "workflowId"})


def without_visible(node: Any) -> Any:
    """``node`` without the fields in :data:`VISIBLE`."""
    if isinstance(node, dict):
        return {k: without_visible(v) for k, v in node.items() if k not in VISIBLE}
    if isinstance(node, list):
        return [without_visible(v) for v in node]
    return node


async def raw_history(temporal_address: str, workflow_id: str) -> dict[str, Any]:
    """The history as the server holds it, read by a client that has no codec at all."""
    bare = await Client.connect(temporal_address)
    history = await bare.get_workflow_handle(workflow_id).fetch_history()
    data: dict[str, Any] = history.to_json_dict()
    return data
