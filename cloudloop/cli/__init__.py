"""The ``cloudloop`` command: ``worker``, ``starter``, ``csi-controller``, ``csi-node``,
``termination-imds``, ``termination``, ``codec-server``,
``temporal setup``, ``temporal claims``, ``temporal release-claim``, ``retry``, ``nodegroup``
and ``layout``, plus the commands of plugins; one module per command group.

Plugins register through the ``cloudloop.commands`` entry point: a callable taking the command
group. The dev stack (``devstack``, installed by ``make setup`` only) adds ``dev``, ``status``,
``inject`` and ``stack`` that way, so the product itself never imports it.

Rules: ``cloudloop.cli`` is the process root, the only part of ``cloudloop`` that imports the
controllers (``starters``, ``workers``); it imports them inside the commands, so ``--help``
loads neither. A group module imports :mod:`.root` and never another group.
"""

from __future__ import annotations

import importlib.metadata
import logging

from cloudloop.cli import layout, nodegroup, processes, retry, temporal, termination
from cloudloop.cli.root import main

__all__ = ["main"]

for _command in (
    *processes.COMMANDS,
    termination.termination,
    temporal.temporal,
    retry.retry,
    nodegroup.nodegroup,
    layout.layout,
):
    main.add_command(_command)


def _load_plugins() -> None:
    for entry in importlib.metadata.entry_points(group="cloudloop.commands"):
        try:
            register = entry.load()
        except ImportError as exc:  # a half-installed plugin must not break the product's commands
            logging.getLogger(__name__).debug("plugin %s not loaded: %s", entry.name, exc)
            continue
        register(main)


_load_plugins()
