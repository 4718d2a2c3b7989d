"""Benchmarks: ``python -m bench`` prints one ``name=value`` line per figure.

Each benchmark is an async function taking a :class:`bench.context.BenchContext` and returning
its figures; add one to :data:`BENCHMARKS` and it runs in the same stack as the others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.actions import temporal_action_figures
from bench.aws_machines import aws_machine_figures
from bench.context import BenchContext
from bench.csi import csi_figures
from bench.layout import layout_figures
from bench.layout_openstack import openstack_layout_figures
from bench.layout_virt import layout_virt_figures
from bench.layout_vsphere import vsphere_layout_figures
from bench.lbscale import lb_scale_figures
from bench.lbworkers import lb_worker_figures
from bench.loadbalancer import lb_benchmarks
from bench.loadbalancer_postgres import lb_postgres_benchmarks
from bench.machine import machine_figures
from bench.node import node_figures
from bench.nodegroup import nodegroup_figures
from bench.nodegroup_reconcile import nodegroup_reconcile_figures
from bench.openstack import openstack_figures
from bench.openstack_machines import openstack_machine_figures
from bench.probe import probe_overhead
from bench.pvc_clouds import pvc_cloud_figures
from bench.pvcburst import pvc_burst_figures
from bench.scale import scale_figures
from bench.snapshots import snapshot_figures
from bench.termination import termination_figures
from bench.volume import volume_figures
from bench.volume_modify import volume_modify_figures
from bench.vsphere import vsphere_figures
from bench.vsphere_machines import vsphere_machine_figures
from bench.worker_kill import worker_kill_figures

#: A benchmark module: its figures, measured in the shared stack.
Benchmark = Callable[[BenchContext], Awaitable[dict[str, float]]]

BENCHMARKS: dict[str, Benchmark] = {
    "probe": probe_overhead,
    "nodes": node_figures,
    "loadbalancers": lb_benchmarks,
    "loadbalancers-postgres": lb_postgres_benchmarks,
    "termination": termination_figures,
    "volumes": volume_figures,
    "volume-modify": volume_modify_figures,
    "machines": machine_figures,
    "vsphere": vsphere_figures,
    "openstack": openstack_figures,
    "nodegroups": nodegroup_figures,
    "nodegroup-reconcile": nodegroup_reconcile_figures,
    "openstack-machines": openstack_machine_figures,
    "aws-machines": aws_machine_figures,
    "vsphere-machines": vsphere_machine_figures,
    "csi": csi_figures,
    "pvc-burst": pvc_burst_figures,
    "pvc-clouds": pvc_cloud_figures,
    "snapshots": snapshot_figures,
    "layouts": layout_figures,
    "layouts-vsphere": vsphere_layout_figures,
    "layouts-virt": layout_virt_figures,
    "layouts-openstack": openstack_layout_figures,
    "scale": scale_figures,
    "lbscale": lb_scale_figures,
    "worker-kill": worker_kill_figures,
    "lbworkers": lb_worker_figures,
    # last: counts the histories the benchmarks above left behind
    "actions": temporal_action_figures,
}
