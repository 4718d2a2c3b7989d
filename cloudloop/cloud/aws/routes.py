"""AWS routes: pod-CIDR routes to instances in the route tables tagged for the cluster.

``list_routes`` is one ``DescribeRouteTables`` filtered by the cluster tag (a second one with
the legacy ``KubernetesCluster`` tag only when no table has the current tag) and reports only
what the route controller may own: routes that target an instance and blackhole routes (gateway,
NAT and ``local`` routes are never listed, so never deleted). With several cluster route tables
(e.g. one per zone) a destination counts as routed to an instance only when every table agrees;
otherwise it is reported without a target so the controller replaces it. ``create_route`` turns
off the instance's source/destination check (``ModifyInstanceAttribute``) as upstream does, then
creates the route in every table, replacing a blackhole or different route already there.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.tags import cluster_tag_filters, tag_dict, tagged_for_cluster

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import RouteTableTypeDef

BLACKHOLE = "blackhole"


def route_name(cluster: str, destination_cidr: str) -> str:
    """Upstream AWS route name: ``<cluster>-<destinationCIDR>``."""
    return f"{cluster}-{destination_cidr}"


def _destination(raw: dict[str, Any]) -> str:
    return str(raw.get("DestinationCidrBlock") or raw.get("DestinationIpv6CidrBlock") or "")


def routes_from_tables(cluster: str, tables: Sequence[Mapping[str, Any]]) -> list[models.Route]:
    """Merge the cluster's route tables into one route per destination (pure)."""
    entries: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for table in tables:
        for raw in table.get("Routes", []) or []:
            destination = _destination(raw)
            blackhole = raw.get("State") == BLACKHOLE
            instance_id = str(raw.get("InstanceId") or "")
            if destination and (blackhole or instance_id):
                entries[destination].append((instance_id, blackhole))
    routes: list[models.Route] = []
    for destination, found in sorted(entries.items()):
        targets = {instance_id for instance_id, _ in found}
        if any(blackhole for _, blackhole in found):
            route = models.Route(
                name=route_name(cluster, destination), destination_cidr=destination, blackhole=True
            )
        elif len(found) == len(tables) and len(targets) == 1:
            route = models.Route(
                name=route_name(cluster, destination),
                destination_cidr=destination,
                target_instance_id=targets.pop(),
            )
        else:  # the tables disagree: no single target
            route = models.Route(
                name=route_name(cluster, destination), destination_cidr=destination
            )
        routes.append(route)
    return routes


class _Destination(TypedDict, total=False):
    """A route's destination, as CreateRoute, ReplaceRoute and DeleteRoute name it."""

    DestinationCidrBlock: str
    DestinationIpv6CidrBlock: str


class _RouteArgs(_Destination):
    """One route of a route table: CreateRoute's and ReplaceRoute's arguments."""

    RouteTableId: str
    InstanceId: str


def _destination_args(destination_cidr: str) -> _Destination:
    if ":" in destination_cidr:
        return {"DestinationIpv6CidrBlock": destination_cidr}
    return {"DestinationCidrBlock": destination_cidr}


class AwsRoutes:
    """VPC route-table routes on the session."""

    _route_tables_lock = threading.Lock()

    def __init__(self, session: AwsBase) -> None:
        self.session = session
        #: Cluster → its route table IDs as of the last listing (saves a describe per create).
        self._route_table_ids: dict[str, list[str]] = {}

    def _cluster_route_tables(self, cluster: str) -> list[RouteTableTypeDef]:
        """One call for ``kubernetes.io/cluster/<c>`` tables; the legacy tag only if none."""
        tables: list[RouteTableTypeDef] = []
        paginator = self.session.client("ec2").get_paginator("describe_route_tables")
        for filters in cluster_tag_filters(cluster):
            with calling("DescribeRouteTables"):
                for page in paginator.paginate(Filters=filters):
                    tables.extend(
                        t
                        for t in page.get("RouteTables", [])
                        if tagged_for_cluster(tag_dict(t.get("Tags")), cluster)
                    )
            if tables:
                break
        if not tables:
            raise errors.NotFound(
                NAME, "DescribeRouteTables", f"no route table is tagged for cluster {cluster}"
            )
        with self._route_tables_lock:
            self._route_table_ids[cluster] = [str(t["RouteTableId"]) for t in tables]
        return tables

    def _table_ids(self, cluster: str) -> list[str]:
        with self._route_tables_lock:
            known = list(self._route_table_ids.get(cluster, []))
        if known:
            return known
        return [str(t["RouteTableId"]) for t in self._cluster_route_tables(cluster)]

    # -- routes ----------------------------------------------------------------------------
    def list_routes(self, cluster: str) -> list[models.Route]:
        return routes_from_tables(cluster, self._cluster_route_tables(cluster))

    def create_route(self, cluster: str, route: models.Route) -> None:
        if not route.target_instance_id:
            raise errors.InvalidRequest(
                NAME, "CreateRoute", f"route {route.destination_cidr} has no target instance"
            )
        ec2 = self.session.client("ec2")
        with calling("ModifyInstanceAttribute"):
            ec2.modify_instance_attribute(
                InstanceId=route.target_instance_id, SourceDestCheck={"Value": False}
            )
        for table_id in self._table_ids(cluster):
            args: _RouteArgs = {
                "RouteTableId": table_id,
                "InstanceId": route.target_instance_id,
                **_destination_args(route.destination_cidr),
            }
            try:
                with calling("CreateRoute"):
                    ec2.create_route(**args)
            except errors.AlreadyExists:  # a blackhole or another target: take it over
                with calling("ReplaceRoute"):
                    ec2.replace_route(**args)

    def delete_route(self, cluster: str, route: models.Route) -> None:
        ec2 = self.session.client("ec2")
        for table_id in self._table_ids(cluster):
            try:
                with calling("DeleteRoute"):
                    ec2.delete_route(
                        RouteTableId=table_id, **_destination_args(route.destination_cidr)
                    )
            except errors.NotFound:
                pass
