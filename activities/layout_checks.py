"""What would refuse an apply, looked for before its first create: a refused apply makes nothing.

Upstream Terraform reads every data source during plan, before any resource is created; the
layout engine applies resource by resource, so without this a lookup that refuses (an
``existingVPCID`` or a template the cloud lacks) ended the apply after the resources of earlier
waves were made (a key pair, an IAM role, a folder, a data disk) and left them behind.

:func:`apply_refusals` walks every module of the layout (base first, dependency waves): each
looked-up (``read_only``) resource whose properties are known is inspected — absent is a refusal,
found gives its outputs to the later lookups; each other resource is asked for its own refusals
(:class:`~cloudloop.cloud.layouts.CheckingResources`) with the properties known before anything
is made (``None`` for an output of a resource not made yet). Read-only: only lookups. A cloud
error (not a "does not exist") propagates, so the step is retried, never taken for a refusal.
"""

from __future__ import annotations

from typing import Any

from cloudloop.cloud.layouts import CheckingResources, LayoutResources
from cloudloop.layouts.model import LayoutDef
from cloudloop.rules import layout as rules


def apply_refusals(resources: LayoutResources, layout: LayoutDef) -> list[str]:
    """Every refusal an apply of ``layout`` would meet, one line each (empty: none)."""
    known: dict[str, dict[str, Any]] = {}
    refusals: list[str] = []
    for module in layout.modules:
        for wave in rules.waves(module.resources):
            for resource in wave:
                if resource.read_only:
                    try:
                        properties = rules.resolve(resource.properties, known)
                    except rules.Unresolved:
                        continue  # it needs something an apply makes first
                    found = resources.inspect(resource, properties)
                    if found is None:
                        refusals.append(
                            f"{resource.key}: not found (it is looked up, never created)"
                        )
                    else:
                        known[resource.key] = found.outputs
                elif isinstance(resources, CheckingResources):
                    properties = rules.resolve_known(resource.properties, known)
                    refusals += resources.refusals(resource, properties)
    return list(dict.fromkeys(refusals))
