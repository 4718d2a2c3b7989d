"""kube-apiserver audit of pod evictions, so tests can count every eviction request a drain made.

:func:`eviction_audit_args` writes a policy that logs only ``create pods/eviction`` (metadata
level, one JSON line per answered request) and returns the kube-apiserver flags that enable it;
:func:`read_evictions` reads the log back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create"]
    resources:
      - group: ""
        resources: ["pods/eviction"]
  - level: None
"""


@dataclass(frozen=True)
class EvictionRecord:
    namespace: str
    name: str
    code: int
    time: str


def eviction_audit_log(state_dir: Path) -> Path:
    return state_dir / "audit" / "evictions.log"


def eviction_audit_args(state_dir: Path) -> tuple[str, ...]:
    """kube-apiserver flags that log every eviction request into :func:`eviction_audit_log`."""
    folder = state_dir / "audit"
    folder.mkdir(parents=True, exist_ok=True)
    policy = folder / "policy.yaml"
    policy.write_text(POLICY)
    return (
        f"--audit-policy-file={policy}",
        f"--audit-log-path={eviction_audit_log(state_dir)}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
    )


def read_evictions(log: Path, namespace: str | None = None) -> list[EvictionRecord]:
    """Every answered eviction request in the audit log (of ``namespace``, if given)."""
    if not log.exists():
        return []
    records: list[EvictionRecord] = []
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a line still being written
            continue
        ref = event.get("objectRef") or {}
        if ref.get("subresource") != "eviction" or event.get("stage") != "ResponseComplete":
            continue
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        records.append(
            EvictionRecord(
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
                code=int((event.get("responseStatus") or {}).get("code", 0)),
                time=str(event.get("stageTimestamp", "")),
            )
        )
    return records
