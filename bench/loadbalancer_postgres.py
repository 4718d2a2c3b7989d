"""The load-balancer benchmark (:mod:`bench.loadbalancer`) on the production-shaped Temporal: the
server built from its Go module on PostgreSQL with SQL visibility (:mod:`devstack.temporal_server`),
started beside the run's stack (same control plane, same moto) for this module only.

Every figure of :func:`bench.loadbalancer.lb_benchmarks` is printed with ``_postgres`` appended,
so the overhead ratios are ``lb_ensure_overhead_ratio_postgres`` and
``lb_ensure_200_services_wall_ratio_postgres``, against the same direct baseline measured in the
same module; ``temporal_postgres_start_s`` is how long PostgreSQL, the schema and the server took
(a cold tool cache builds the server first, not counted)."""

from __future__ import annotations

import asyncio
import dataclasses

from bench.context import BenchContext
from bench.loadbalancer import lb_benchmarks
from cloudloop import temporal
from devstack import gotools
from devstack.process import free_port, stop_all
from devstack.temporal_server import PostgresTemporal


async def lb_postgres_benchmarks(ctx: BenchContext) -> dict[str, float]:
    binaries = await asyncio.to_thread(
        gotools.ensure_built, ["temporal-server", "temporal-sql-tool"]
    )
    server = PostgresTemporal(
        state_dir=ctx.stack.state_dir / "temporal-postgres",
        logs=ctx.stack.state_dir / "logs",
        port=free_port(),
    )
    try:
        await asyncio.to_thread(server.start, binaries)
        settings = ctx.settings.model_copy(
            update={
                "temporal": ctx.settings.temporal.model_copy(update={"address": server.address})
            }
        )
        client = await temporal.connect(settings.temporal)
        figures = await lb_benchmarks(dataclasses.replace(ctx, client=client, settings=settings))
    finally:
        stop_all(server.processes()[:1])
        stop_all(server.processes())
        server.cleanup()
    return {
        "temporal_postgres_start_s": server.timings.get("ready_s", 0.0),
        **{f"{name}_postgres": value for name, value in figures.items()},
    }
