"""``codec_payload_bytes_ratio``: what the payload codec costs a history in bytes.

Over the complete histories of a benchmark's workflows (the ``loadbalancers`` module's samples:
create, ensure, status, Events, delete), every payload the codec encrypted (search attributes
and the SDK core's own marker details are not), stored size over its decrypted size: the
serialized ``Payload`` (metadata and data) both times, as the server stores and counts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from cloudloop.codec import ENCODING, EncryptionCodec

#: Marker details the SDK core writes itself, never through the codec.
_CORE_MARKER_DETAILS = frozenset({"patch-data", "data"})


def _payloads(node: Any) -> Iterable[dict[str, Any]]:
    if isinstance(node, dict):
        if "markerName" in node and "details" in node:
            for key, value in node["details"].items():
                if key not in _CORE_MARKER_DETAILS:
                    yield from _payloads(value)
            return
        if isinstance(node.get("metadata"), dict) and "data" in node:
            yield node
            return
        for key, value in node.items():
            if key != "searchAttributes":
                yield from _payloads(value)
    elif isinstance(node, list):
        for value in node:
            yield from _payloads(value)


async def payload_bytes(client: Client, workflow_ids: Iterable[str]) -> dict[str, float]:
    """The figures over ``workflow_ids``' histories, read with ``client``'s codec keys."""
    codec = client.data_converter.payload_codec
    if not isinstance(codec, EncryptionCodec):
        return {}
    stored = plain = count = 0
    for workflow_id in workflow_ids:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        for node in _payloads(history.to_json_dict()):
            payload = json_format.ParseDict(node, Payload())
            if payload.metadata.get("encoding") != ENCODING:
                continue
            stored += payload.ByteSize()
            plain += codec.ring.decrypt(payload).ByteSize()
            count += 1
    if not plain:
        return {}
    return {
        "codec_payload_bytes_ratio": stored / plain,
        "codec_payload_bytes_encrypted": float(stored),
        "codec_payload_bytes_plain": float(plain),
        "codec_payloads": float(count),
    }
