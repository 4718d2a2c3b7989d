"""Cluster API machines: the starter, its three reconcilers and ``cloudloop retry machine``.

- :mod:`.starter` — :class:`MachineStarter`: the informers, the work queue and the key routing.
- :mod:`.infra_machine` — InfraMachine → signal-with-start of its ``MachineWorkflow``.
- :mod:`.infra_cluster` — InfraCluster → ready and provisioned (nothing to create in the cloud).
- :mod:`.node_group` — cloudloop NodeGroup → its templates and MachineDeployments per zone.
- :mod:`.retry` — :func:`request_retry`, the command's side.
"""

from starters.machine.retry import request_retry
from starters.machine.starter import MachineStarter

__all__ = ["MachineStarter", "request_retry"]
