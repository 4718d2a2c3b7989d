"""How one annotation value is read: Go booleans, bounded numbers, lists, key=value pairs, ports.

Each reader takes the annotation's name (for the message) and its raw value and returns the typed
value, or raises :class:`~cloudloop.cloud.errors.InvalidRequest` naming the annotation and the
value, so an invalid value becomes a ``SyncLoadBalancerFailed`` Event and no cloud call is made.
The readers accept what cloud-provider-aws accepts (``strconv.ParseBool``, ``strconv.ParseInt``,
comma lists with blanks ignored); where upstream would pass a value on for AWS to refuse after
part of the load balancer was changed, they refuse it first (ranges, names, address syntax).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from cloudloop.cloud import errors
from cloudloop.cloud.aws.base import NAME

_OPERATION = "ParseServiceAnnotations"
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def invalid(message: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(NAME, _OPERATION, message)


def value_of(annotations: Mapping[str, str], annotation: str) -> str | None:
    """The annotation's value with blanks trimmed; ``None`` when absent or blank."""
    value = annotations.get(annotation)
    if value is None:
        return None
    return value.strip() or None


def items(value: str) -> list[str]:
    """A comma-separated list, blanks trimmed and empty items dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]


def go_bool(annotation: str, value: str | None, default: bool) -> bool:
    """Go's ``strconv.ParseBool``, as upstream reads ``*-enabled`` annotations."""
    if value is None:
        return default
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise invalid(f"error parsing service annotation: {annotation}={value} (not a boolean)")


def bounded_int(annotation: str, value: str | None, low: int, high: int) -> int | None:
    """A whole number in ``low..high`` (``None`` when absent)."""
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise invalid(f"{annotation}: {value!r} is not a number") from None
    if not low <= number <= high:
        raise invalid(f"{annotation}: {number} is outside {low}..{high}")
    return number


def key_values(annotation: str, value: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (a bare ``k`` means an empty value), as cloud-provider-aws reads it."""
    found: dict[str, str] = {}
    for item in items(value):
        key, _, val = item.partition("=")
        key, val = key.strip(), val.strip()
        if not key:
            raise invalid(f"{annotation}: {item!r} has no key")
        found[key] = val
    return found


@dataclass(frozen=True)
class PortSelection:
    """``aws-load-balancer-ssl-ports``: port names and numbers (``None`` elsewhere means all)."""

    names: frozenset[str] = frozenset()
    numbers: frozenset[int] = frozenset()

    def selects(self, name: str, number: int) -> bool:
        return number in self.numbers or name in self.names or name.lower() in self.names


def port_selection(annotation: str, value: str | None) -> PortSelection | None:
    """Names or numbers; ``*`` or nothing selects every port (upstream ``getPortSets``)."""
    if value is None or value == "*":
        return None
    names: set[str] = set()
    numbers: set[int] = set()
    for item in items(value):
        # ASCII digits only, as Go's strconv.Atoi: str.isdigit() is also true of "¹" or "٣".
        if item.isascii() and item.lstrip("-").isdigit():
            number = int(item)
            if not 0 < number < 65536:
                raise invalid(f"{annotation}: {number} is not a port number")
            numbers.add(number)
        elif item == "*":
            raise invalid(f"{annotation}: '*' selects every port and cannot be listed with others")
        else:
            names.add(item)
    return PortSelection(frozenset(names), frozenset(numbers))


def cidrs(annotation: str, values: list[str]) -> list[str]:
    """Each value an IPv4 or IPv6 network (host bits may be set, as Go's ``ParseCIDR``)."""
    found: list[str] = []
    for value in values:
        try:
            network = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise invalid(
                f"{annotation}: {value} is not valid. Expecting a comma-separated list of source "
                "IP ranges. For example, 10.0.0.0/24,192.168.2.0/24"
            ) from None
        if "/" not in value:
            raise invalid(f"{annotation}: {value} is not valid (a CIDR has a prefix length)")
        found.append(str(network))
    return found


def ipv4_addresses(annotation: str, value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    found: list[str] = []
    for item in items(value):
        try:
            found.append(str(ipaddress.IPv4Address(item)))
        except ValueError:
            raise invalid(f"{annotation}: {item!r} is not an IPv4 address") from None
    if len(set(found)) != len(found):
        raise invalid(f"{annotation}: an address is listed twice")
    return tuple(found)
