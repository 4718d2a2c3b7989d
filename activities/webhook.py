"""The drain notification webhook, as aws-node-termination-handler sends it.

The template uses upstream's field names in Go-template form (``{{ .EventID }}``, ``{{ .Kind }}``,
``{{ .InstanceID }}``, ``{{ .NodeName }}``, ``{{ .Description }}``, ``{{ .StartTime }}``, ...);
only plain field references are supported (no pipelines or sprig functions). Values are
JSON-string-escaped when the Content-Type header says JSON, so a description never breaks the
body. The POST has a 5 s timeout; a non-2xx answer or an error is logged, never raised.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.request
from datetime import UTC, datetime

from cloudloop.messages.termination import WebhookInput

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
_FIELD = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")
NO_VALUE = "<no value>"  # what Go's text/template prints for a missing field


def go_time(value: datetime) -> str:
    """``time.Time.String()`` of Go for a UTC time: ``2020-07-01 22:19:58 +0000 UTC``."""
    utc = value.astimezone(UTC)
    text = utc.strftime("%Y-%m-%d %H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return f"{text} +0000 UTC"


def template_fields(input: WebhookInput) -> dict[str, str]:
    return {
        "EventID": input.event_id,
        "Kind": input.kind,
        "Monitor": "SQS_MONITOR",
        "InstanceID": input.instance_id,
        "NodeName": input.node_name,
        "Description": input.description,
        "StartTime": go_time(input.start_time),
        "State": input.state,
        "AutoScalingGroupName": input.auto_scaling_group,
        "InstanceType": input.instance_type,
        "AvailabilityZone": input.availability_zone,
        "ProviderID": input.provider_id,
    }


def render(template: str, fields: dict[str, str], *, json_escape: bool = False) -> str:
    def value(match: re.Match[str]) -> str:
        text = fields.get(match.group(1), NO_VALUE)
        return json.dumps(text)[1:-1] if json_escape else text

    return _FIELD.sub(value, template)


def parse_headers(headers_json: str) -> dict[str, str]:
    """``--webhook-headers``: a JSON object of header names to string values."""
    parsed = json.loads(headers_json or "{}")
    if not isinstance(parsed, dict):
        raise ValueError("webhook headers must be a JSON object")
    return {str(k): str(v) for k, v in parsed.items()}


def send(url: str, headers: dict[str, str], template: str, input: WebhookInput) -> int | None:
    """POST the rendered template; the HTTP status, or ``None`` when there was no answer."""
    is_json = any(k.lower() == "content-type" and "json" in v.lower() for k, v in headers.items())
    body = render(template, template_fields(input), json_escape=is_json).encode()
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            status = int(response.status)
    except urllib.error.HTTPError as err:
        status = int(err.code)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        log.warning("webhook for node %s failed: %s", input.node_name, exc)
        return None
    if not 200 <= status < 300:
        log.warning("webhook for node %s answered %d", input.node_name, status)
    else:
        log.info("webhook for node %s sent (%d)", input.node_name, status)
    return status
