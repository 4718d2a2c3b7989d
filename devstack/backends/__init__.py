"""One support module per cloud backend, shared by the tests and the benchmarks: how to start the
backend (moto is part of every stack; the emulators can run alone), the settings that point a
driver at it, its SDK clients, and the cloud objects a scenario starts from.

Rules: one module per backend (``aws``, ``dvp``, ``zvirt``, ``openstack``, ``vsphere``), named
after the provider; what only one test module needs stays in that module or its feature's
``conftest.py``. The settings builders set the connection and nothing else: timeouts and polling
are the caller's (each scenario keeps its own). Dev stack, tests and benchmarks only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from devstack.local import LocalStack, StackOptions


@contextmanager
def emulator_only(state_dir: Path, **emulators: Any) -> Iterator[LocalStack]:
    """A local stack of nothing but the emulators given as :class:`StackOptions` fields
    (``ovirt_emulator=...``, ``vcsim=...``, ``openstack_emulator=...``): no Temporal, no moto, no
    control plane. Stopped when the block ends."""
    local = LocalStack(
        StackOptions(state_dir=state_dir, temporal=False, moto=False, kube=(), **emulators)
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def section_env(provider: str, section: BaseModel) -> dict[str, str]:
    """``CLOUDLOOP_<PROVIDER>__<FIELD>`` for every set field of a provider's settings section
    (nested models as ``__<FIELD>__<FIELD>``, lists and mappings as JSON, secrets in clear): the
    environment a chart gives a worker for those settings."""
    return _fields_env(f"CLOUDLOOP_{provider.upper()}", section)


def _fields_env(prefix: str, model: BaseModel) -> dict[str, str]:
    env: dict[str, str] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        key = f"{prefix}__{name.upper()}"
        if isinstance(value, BaseModel):
            env.update(_fields_env(key, value))
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None or value == "" or value == [] or value == {}:
            continue
        env[key] = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return env
