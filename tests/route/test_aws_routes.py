"""The AWS routes mixin: which routes it lists, and its calls (botocore Stubber, no network)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from cloudloop.cloud import errors
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.routes import routes_from_tables
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.models import Route

TAGGED = [{"Key": "kubernetes.io/cluster/c", "Value": "owned"}]


def table(table_id: str, *routes: dict[str, Any], tags: Any = None) -> dict[str, Any]:
    return {
        "RouteTableId": table_id,
        "Routes": list(routes),
        "Tags": TAGGED if tags is None else tags,
    }


LOCAL = {"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local", "State": "active"}


def to(cidr: str, instance_id: str, state: str = "active") -> dict[str, Any]:
    return {"DestinationCidrBlock": cidr, "InstanceId": instance_id, "State": state}


def simple(routes: list[Route]) -> set[tuple[str, str, bool]]:
    return {(r.destination_cidr, r.target_instance_id, r.blackhole) for r in routes}


@pytest.mark.parametrize(
    ("tables", "expected"),
    [
        pytest.param(
            [table("rtb-1", LOCAL, to("10.244.1.0/24", "i-a"))],
            {("10.244.1.0/24", "i-a", False)},
            id="instance-route-listed-gateway-not",
        ),
        pytest.param(
            [
                table(
                    "rtb-1",
                    {"DestinationCidrBlock": "10.244.2.0/24", "State": "blackhole"},
                    to("10.244.3.0/24", "i-gone", "blackhole"),
                )
            ],
            {("10.244.2.0/24", "", True), ("10.244.3.0/24", "", True)},
            id="blackholes-listed",
        ),
        pytest.param(
            [
                table(
                    "rtb-1",
                    {"DestinationIpv6CidrBlock": "fd00:1::/64", "InstanceId": "i-a"},
                    {"DestinationCidrBlock": "10.244.4.0/24", "NatGatewayId": "nat-1"},
                )
            ],
            {("fd00:1::/64", "i-a", False)},
            id="ipv6-listed-nat-not",
        ),
        pytest.param(
            [
                table("rtb-1", to("10.244.1.0/24", "i-a"), to("10.244.2.0/24", "i-b")),
                table("rtb-2", to("10.244.1.0/24", "i-a"), to("10.244.2.0/24", "i-c")),
            ],
            {("10.244.1.0/24", "i-a", False), ("10.244.2.0/24", "", False)},
            id="tables-that-disagree-give-no-target",
        ),
        pytest.param(
            [table("rtb-1", to("10.244.1.0/24", "i-a")), table("rtb-2", LOCAL)],
            {("10.244.1.0/24", "", False)},
            id="route-missing-from-one-table-gives-no-target",
        ),
    ],
)
def test_routes_from_tables(tables: list[dict[str, Any]], expected: set[Any]) -> None:
    routes = routes_from_tables("c", tables)
    assert simple(routes) == expected
    assert all(r.name == f"c-{r.destination_cidr}" for r in routes)


FILTER = {"Filters": [{"Name": "tag-key", "Values": ["kubernetes.io/cluster/c"]}]}
LEGACY_FILTER = {"Filters": [{"Name": "tag:KubernetesCluster", "Values": ["c"]}]}


def test_list_routes_is_one_filtered_call_and_skips_untagged(
    stubbed: tuple[AwsDriver, Stubber],
) -> None:
    driver, stubber = stubbed
    legacy_other = table(
        "rtb-3", to("10.244.3.0/24", "i-c"), tags=[{"Key": "KubernetesCluster", "Value": "x"}]
    )
    stubber.add_response(
        "describe_route_tables",
        {"RouteTables": [table("rtb-1", to("10.244.1.0/24", "i-a")), legacy_other]},
        FILTER,
    )
    assert simple(driver.routes.list_routes("c")) == {("10.244.1.0/24", "i-a", False)}


def test_legacy_tagged_table_is_found_second(stubbed: tuple[AwsDriver, Stubber]) -> None:
    driver, stubber = stubbed
    legacy = table(
        "rtb-2", to("10.244.2.0/24", "i-b"), tags=[{"Key": "KubernetesCluster", "Value": "c"}]
    )
    stubber.add_response("describe_route_tables", {"RouteTables": []}, FILTER)
    stubber.add_response("describe_route_tables", {"RouteTables": [legacy]}, LEGACY_FILTER)
    assert simple(driver.routes.list_routes("c")) == {("10.244.2.0/24", "i-b", False)}


def test_no_cluster_route_table_is_an_error(stubbed: tuple[AwsDriver, Stubber]) -> None:
    driver, stubber = stubbed
    stubber.add_response("describe_route_tables", {"RouteTables": []}, FILTER)
    stubber.add_response("describe_route_tables", {"RouteTables": []}, LEGACY_FILTER)
    with pytest.raises(errors.NotFound):
        driver.routes.list_routes("c")


def test_create_disables_source_dest_check_and_replaces_an_existing_route(
    stubbed: tuple[AwsDriver, Stubber],
) -> None:
    driver, stubber = stubbed
    stubber.add_response("describe_route_tables", {"RouteTables": [table("rtb-1")]}, FILTER)
    driver.routes.list_routes("c")  # learns the table; create needs no second describe
    stubber.add_response(
        "modify_instance_attribute",
        {},
        {"InstanceId": "i-a", "SourceDestCheck": {"Value": False}},
    )
    args = {"RouteTableId": "rtb-1", "InstanceId": "i-a", "DestinationCidrBlock": "10.244.1.0/24"}
    stubber.add_client_error(
        "create_route", "RouteAlreadyExists", "exists", 400, expected_params=args
    )
    stubber.add_response("replace_route", {}, args)
    driver.routes.create_route(
        "c", Route(name="c-x", destination_cidr="10.244.1.0/24", target_instance_id="i-a")
    )


def test_delete_of_a_missing_route_is_fine(stubbed: tuple[AwsDriver, Stubber]) -> None:
    driver, stubber = stubbed
    stubber.add_response(
        "describe_route_tables", {"RouteTables": [table("rtb-1"), table("rtb-2")]}, FILTER
    )
    driver.routes.list_routes("c")
    stubber.add_client_error(
        "delete_route",
        "InvalidRoute.NotFound",
        "gone",
        400,
        expected_params={"RouteTableId": "rtb-1", "DestinationCidrBlock": "10.244.1.0/24"},
    )
    stubber.add_response(
        "delete_route", {}, {"RouteTableId": "rtb-2", "DestinationCidrBlock": "10.244.1.0/24"}
    )
    driver.routes.delete_route(
        "c", Route(name="c-x", destination_cidr="10.244.1.0/24", blackhole=True)
    )


def test_create_without_target_is_refused() -> None:
    driver = AwsDriver(AwsSettings())
    with pytest.raises(errors.InvalidRequest):
        driver.routes.create_route("c", Route(name="c-x", destination_cidr="10.244.1.0/24"))
