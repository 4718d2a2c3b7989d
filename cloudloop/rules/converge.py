"""Converge decisions, pure: a module's status from its plan, the steps held for approval.

Rules:
- A module's status is terraform-state-exporter's: ``absent`` when a node module has none of
  its own resources (a node to make), ``destructively_changed`` when a resource differs in a field
  only a replacement changes (a subnet's CIDR, a master's image: a delete, then a create),
  ``changed`` when something is to create or to repair in place, else ``ok``. A field kept on
  purpose (bootstrap data of a running machine) changes nothing.
- Every replacement is destructive (it deletes the resource first): it is a :class:`HeldStep`
  keyed ``<module>/<resource key>`` and waits for approval; creations and in-place repairs are
  safe.
- The cluster's status is the worst of its modules' (the exporter's order: error,
  destructively_changed, abandoned, absent, changed, ok).
"""

from __future__ import annotations

from collections.abc import Iterable

from cloudloop.layouts.model import ModuleDef
from cloudloop.messages.layout import PlanModuleResult
from cloudloop.messages.layout_converge import STATUSES, ConvergeStatus, HeldStep, ModuleStatus


def module_status(module: ModuleDef, plan: PlanModuleResult) -> ModuleStatus:
    """The status of ``module`` as ``plan`` (its read-only diff) shows it."""
    owned = {r.key for r in module.resources if not r.read_only}
    planned = [p for p in plan.resources if p.key in owned]
    creates = sum(1 for p in planned if p.action == "create")
    repairs = sum(
        1 for p in planned if p.action == "update" and any(c.how == "repair" for c in p.changes)
    )
    replaces = sum(
        1 for p in planned if p.action == "update" and any(c.how == "replace" for c in p.changes)
    )
    if module.node_name and planned and creates == len(planned):
        status: ConvergeStatus = "absent"
    elif replaces:
        status = "destructively_changed"
    elif creates or repairs:
        status = "changed"
    else:
        status = "ok"
    return ModuleStatus(
        module=module.id,
        status=status,
        node_group=module.group,
        name=module.node_name,
        to_create=creates,
        to_change=repairs,
        to_replace=replaces,
    )


def held_steps(module: ModuleDef, plan: PlanModuleResult) -> list[HeldStep]:
    """The replacements ``plan`` shows in ``module``, each with the fields that need it."""
    owned = {r.key for r in module.resources if not r.read_only}
    return [
        HeldStep(
            key=step_key(module.id, p.key),
            module=module.id,
            resource=p.key,
            changes=[c for c in p.changes if c.how == "replace"],
        )
        for p in plan.resources
        if p.key in owned and p.action == "update" and any(c.how == "replace" for c in p.changes)
    ]


def step_key(module_id: str, resource_key: str) -> str:
    return f"{module_id}/{resource_key}"


def worst(statuses: Iterable[ConvergeStatus]) -> ConvergeStatus:
    """The worst status (``ok`` for none)."""
    given = set(statuses)
    return next((s for s in STATUSES if s in given), "ok")


def has_safe_work(status: ModuleStatus) -> bool:
    """Something to create or repair in place (what an auto-converge applies)."""
    return bool(status.to_create or status.to_change)
