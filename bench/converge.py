"""The layout benches' worker and their one converge pass.

- :func:`layout_worker`: the layout and converge workflows with the layout activities reading
  under ``source_dir`` and the converge report without a cluster (its report fails, the pass's
  work stands: the benches count cloud calls, not the cluster's status);
- :func:`plan_only_pass`: one ``LayoutConverge`` pass without auto-converge, as the cluster's
  Schedule runs it every interval, and its result.

Rules:
- The pass reads no bootstrap data from a cluster (there is none): what it costs is the cloud's
  read-only calls, the figure ``<cloud>_layout_converge_pass_cloud_calls``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from activities.layout import LayoutActivities
from activities.layout_converge import ConvergeActivities
from cloudloop import temporal
from cloudloop.cloud.registry import Settings
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout_converge import ConvergeInput, ConvergeResult
from cloudloop.settings import LayoutSettings
from workflows.layout import LAYOUT_WORKFLOWS
from workflows.layout_converge import CONVERGE_WORKFLOWS, LayoutConvergeWorkflow


def layout_worker(client: Client, queue: str, settings: Settings, source_dir: Path) -> Worker:
    """The layout and converge workflows and activities on ``queue``, in this process."""
    mounted = settings.model_copy(update={"layouts": LayoutSettings(source_dir=source_dir)})
    activities = [*LayoutActivities(mounted).all(), *ConvergeActivities(None).all()]
    return temporal.make_worker(
        client,
        queue,
        workflows=[*LAYOUT_WORKFLOWS, *CONVERGE_WORKFLOWS],
        activities=activities,  # type: ignore[arg-type]
    )


async def plan_only_pass(
    client: Client, queue: str, provider: str, source: ConfigSource, cluster: ClusterIdentity
) -> ConvergeResult:
    """One plan-only converge pass of the layout, run to its end."""
    result: ConvergeResult = await client.execute_workflow(
        LayoutConvergeWorkflow.run,
        ConvergeInput(
            provider=provider, source=source, cluster=cluster, bootstrap_from_cluster=False
        ),
        id=f"bench-converge-{cluster.prefix}-{uuid.uuid4().hex[:6]}",
        task_queue=queue,
    )
    return result
