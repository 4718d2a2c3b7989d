"""Workflow IDs within a cluster's scope: ``<scope>/<id>``, so two clusters on one Temporal
namespace never share a workflow (one's starter would join, or signal, the other's run).

The scope is the cluster's general task queue (``TemporalSettings.id_scope``, decided in
:mod:`cloudloop.settings`); this module only builds the IDs.

Rules:
- An empty scope leaves the ID as it was: an install on the legacy queue ``cloudloop`` keeps the
  IDs of its running workflows (no second workflow for one cloud resource after an upgrade).
- IDs that already carry a Kubernetes UID (load balancers, machines, probes) or a cloud token
  (lifecycle actions), and random ones (volume reads), are never scoped: they cannot collide.
- A scope holds no ``/`` (the settings refuse one), so ``<scope>/`` is an unambiguous prefix.
"""

from __future__ import annotations


def scoped_id(scope: str, workflow_id: str) -> str:
    """``workflow_id`` within ``scope`` (``<scope>/<id>``; unchanged when ``scope`` is empty)."""
    return f"{scope}/{workflow_id}" if scope else workflow_id
