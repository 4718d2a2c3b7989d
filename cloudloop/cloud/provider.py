"""The provider record: everything the product knows about one cloud, declared in its package.

Each ``cloudloop/cloud/<name>/__init__.py`` declares one :class:`Provider`; the registry lists
them, and the controllers, workers and settings read them instead of naming a cloud.

Rules:
- A record imports nothing heavy: the driver factory imports the SDK-backed driver module
  lazily, so listing providers (settings, CLI) never loads boto3, ovirtsdk4 or pyVmomi.
- ``name`` is the ``provider`` setting's value and the name of the settings section
  (``CLOUDLOOP_<NAME>__*``); ``settings`` is that section's model.
- Optional parts are ``None`` when the cloud has none: Cluster API kinds, the node manager's
  registration Secrets, node-group templates (InstanceClass kind and machine-template contract),
  the termination handler's client, the layouts part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from pydantic import BaseModel

from cloudloop.kube.bodies import Secret

if TYPE_CHECKING:
    from cloudloop.cloud.capi import InfraKinds, NodeTemplates
    from cloudloop.cloud.discovery_schemas import DiscoverySchemas
    from cloudloop.cloud.driver import CloudDriver
    from cloudloop.cloud.layouts import LayoutPart
    from cloudloop.cloud.termination import InstanceMetadata
    from cloudloop.settings import CoreSettings, NthSettings

S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True)
class Provider(Generic[S]):
    """One cloud: its name, settings section, driver and optional parts."""

    name: str
    settings: type[S]
    #: Builds the driver from this provider's settings section (imports it lazily).
    driver: Callable[[S], CloudDriver]
    #: The Cluster API infrastructure kinds this cloud provides, if any.
    infra_kinds: InfraKinds | None = None
    #: The node manager's registration Secrets (``d8-node-manager-cloud-provider``), if any.
    registration: Callable[[S], list[Secret]] | None = None
    #: The node termination handler's client (queue, instances, lifecycle actions), if any;
    #: given the process's driver, if it has one, whose session it may share.
    termination: Callable[[S, NthSettings, CloudDriver | None], Any] | None = None
    #: A node's own view of its instance (the termination handler's IMDS mode), if the cloud
    #: has one: built from the metadata service's endpoint and request timeout alone, with no
    #: credential (a node agent holds none).
    instance_metadata: Callable[[str, float], InstanceMetadata] | None = None
    #: The fields of this provider's settings section that name credential files (the chart's
    #: ``providers.<name>.credentialFiles`` keys). Processes on every node (the CSI node
    #: plugin) are built without them: :meth:`make_node_driver`.
    credential_settings: tuple[str, ...] = ()
    #: Node groups from InstanceClasses: the InstanceClass kind and the ``template.yaml``
    #: turning one into this cloud's InfraMachineTemplate (published beside the registration
    #: Secret, rendered by ``cloudloop nodegroup render``), if the cloud has Cluster API nodes.
    node_templates: NodeTemplates | None = None
    #: On a cloud without load balancers: what serves ``type: LoadBalancer`` Services instead
    #: (said in the Warning each such Service gets).
    load_balancer_hint: str = ""
    #: Layouts (base infrastructure, master and static nodes as durable workflows): a factory
    #: of the cloud's :class:`~cloudloop.cloud.layouts.LayoutPart` (imports it lazily), if any.
    layouts: Callable[[], LayoutPart] | None = None
    #: Deckhouse's schemas of this cloud's discovery documents (the layout's and the
    #: discoverer's), which both must satisfy.
    discovery_schemas: DiscoverySchemas | None = None

    def section(self, settings: CoreSettings) -> S:
        """This provider's section of ``settings``."""
        return cast(S, getattr(settings, self.name))

    def make_driver(self, settings: CoreSettings) -> CloudDriver:
        driver = self.driver(self.section(settings))
        driver.cluster = settings.cluster_name
        return driver

    def make_node_driver(self, settings: CoreSettings) -> CloudDriver:
        """The driver as a node's process needs it (features, provider-ID parsing): its settings
        without the credential files (:attr:`credential_settings`), which a node does not
        mount; it never connects to the cloud."""
        section = self.section(settings)
        blank = {name: None for name in self.credential_settings}
        driver = self.driver(section.model_copy(update=blank))
        driver.cluster = settings.cluster_name
        return driver
