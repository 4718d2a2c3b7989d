"""vSphere datastores: each with its URL, type and free space, their zone tags, storage policies.

The part both discovery (the published ``datastores`` and ``storagePolicies``) and volumes (where
a disk goes, what zone it is in) take at construction, on the driver's one session.

Rules:
- Every read goes through the session (counted, errors translated); nothing is cached here.
- Datastores come in one property-collector retrieval over a container view, sorted by name;
  storage policies in one PBM session on the vCenter cookie, sorted by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.vmomi import PC, SoapStubAdapter, pbm, vim


@dataclass(frozen=True)
class DatastoreView:
    moref: str
    name: str
    url: str
    type: str
    parent: str
    #: ``summary.freeSpace`` (bytes).
    free_bytes: int = 0


class VsphereDatastores:
    """The datastores, their zones and the storage policies, read on the session."""

    def __init__(self, session: VsphereBase) -> None:
        self.session = session

    def datastores(self) -> list[DatastoreView]:
        """Every datastore with its URL and type, in one retrieval over a container view."""

        def read(si: Any) -> list[DatastoreView]:
            view = si.content.viewManager.CreateContainerView(
                si.content.rootFolder, [vim.Datastore], True
            )
            try:
                spec = PC.FilterSpec(
                    objectSet=[
                        PC.ObjectSpec(
                            obj=view,
                            skip=True,
                            selectSet=[
                                PC.TraversalSpec(
                                    name="v", path="view", skip=False, type=vim.view.ContainerView
                                )
                            ],
                        )
                    ],
                    propSet=[
                        PC.PropertySpec(
                            type=vim.Datastore,
                            pathSet=[
                                "name",
                                "summary.url",
                                "summary.type",
                                "summary.freeSpace",
                                "parent",
                            ],
                        )
                    ],
                )
                found = si.content.propertyCollector.RetrieveContents([spec]) or []
            finally:
                view.DestroyView()
            result = []
            for obj in found:
                props = {p.name: p.val for p in obj.propSet}
                parent = props.get("parent")
                result.append(
                    DatastoreView(
                        moref=obj.obj._moId,
                        name=str(props.get("name", "")),
                        url=str(props.get("summary.url", "")),
                        type=str(props.get("summary.type", "")),
                        parent=parent._moId if parent is not None else "",
                        free_bytes=int(props.get("summary.freeSpace") or 0),
                    )
                )
            return sorted(result, key=lambda d: d.name)

        return self.session.call("ListDatastores", read)

    def datastore_zones(self) -> dict[str, list[str]]:
        """Datastore moref → its zone tags."""
        conn = self.session.connection()
        tags = self.session.tags_by_object([conn.zone_category])
        return {
            moref: sorted(tag for category, tag in pairs if category == conn.zone_category)
            for moref, pairs in tags.items()
        }

    def storage_policies(self) -> list[dict[str, str]]:
        """PBM requirement profiles ``[{name, id}]`` (one PBM session on the vCenter cookie)."""

        def read(si: Any) -> list[dict[str, str]]:
            conn = self.session.connection()
            stub = SoapStubAdapter(
                host=conn.host,
                port=conn.port,
                path="/pbm",
                version="pbm.version.version11",
                sslContext=self.session._ssl_context(conn),
                thumbprint=conn.thumbprint.replace(":", "").lower() or None,
            )
            stub.cookie = si._stub.cookie
            content = pbm.ServiceInstance("ServiceInstance", stub).RetrieveContent()
            manager = content.profileManager
            ids = manager.PbmQueryProfile(
                resourceType=pbm.profile.ResourceType(resourceType="STORAGE"),
                profileCategory="REQUIREMENT",
            )
            profiles = manager.PbmRetrieveContent(profileIds=ids) if ids else []
            return sorted(
                ({"name": str(p.name), "id": str(p.profileId.uniqueId)} for p in profiles),
                key=lambda p: p["name"],
            )

        return self.session.call("PbmQueryProfile", read)
