"""What every starter is built from, and the shape every starter has."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from temporalio.client import Client

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.registry import Settings
from cloudloop.health import Health
from cloudloop.kube.api import Kube
from cloudloop.kube.informer import Informers


@dataclass
class StarterContext:
    """Shared by all starters of one process: one kube client, one informer per resource."""

    settings: Settings
    kube: Kube
    client: Client
    driver: CloudDriver
    informers: Informers
    health: Health = field(default_factory=Health)

    @property
    def task_queue(self) -> str:
        """The general task queue (cloud probes)."""
        return self.settings.temporal.task_queue

    def queue(self, domain: str) -> str:
        """The task queue of a domain (:class:`cloudloop.settings.Domain`)."""
        return self.settings.temporal.queue_for(domain)

    @property
    def cluster(self) -> str:
        return self.settings.cluster_name


class Starter(Protocol):
    """A watcher or loop: ``run`` until ``stop`` (or cancellation)."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...
