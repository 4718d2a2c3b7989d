"""EBS device names: first free name, never one in use or held by a concurrent attach."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws.volumes import DEVICE_NAMES, DeviceAllocator


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_names_follow_the_ebs_csi_driver() -> None:
    assert DEVICE_NAMES[0] == "/dev/xvdba"
    assert DEVICE_NAMES[25] == "/dev/xvdbz"
    assert DEVICE_NAMES[-1] == "/dev/xvdcz"
    assert len(set(DEVICE_NAMES)) == 52


@pytest.mark.parametrize(
    ("in_use", "expected"),
    [
        pytest.param(set(), "/dev/xvdba", id="empty-instance"),
        pytest.param({"/dev/sda1", "/dev/xvda"}, "/dev/xvdba", id="root-devices-ignored"),
        pytest.param({"/dev/xvdba"}, "/dev/xvdbb", id="first-taken"),
        pytest.param({"xvdba", "xvdbb"}, "/dev/xvdbc", id="names-without-dev-prefix"),
        pytest.param({"/dev/xvdbb"}, "/dev/xvdba", id="gap-is-reused"),
    ],
)
def test_first_free_name(in_use: set[str], expected: str) -> None:
    assert DeviceAllocator().reserve("i-1", in_use) == expected


def test_reserved_names_are_not_handed_out_twice() -> None:
    allocator = DeviceAllocator()
    assert allocator.reserve("i-1", set()) == "/dev/xvdba"
    assert allocator.reserve("i-1", set()) == "/dev/xvdbb"
    assert allocator.reserve("i-2", set()) == "/dev/xvdba"  # per instance


def test_released_names_stay_held_for_a_while() -> None:
    clock = FakeClock()
    allocator = DeviceAllocator(hold_s=30, clock=clock)
    device = allocator.reserve("i-1", set())
    allocator.release("i-1", device)
    clock.now += 29
    assert allocator.reserve("i-1", set()) == "/dev/xvdbb"  # the mappings read may be stale
    clock.now += 2
    assert "/dev/xvdba" not in allocator.held("i-1")
    assert allocator.reserve("i-1", set()) == "/dev/xvdba"


def test_exhausted_instance_is_resource_exhausted() -> None:
    allocator = DeviceAllocator(names=["/dev/xvdba", "/dev/xvdbb"])
    assert allocator.reserve("i-1", {"/dev/xvdba"}) == "/dev/xvdbb"
    with pytest.raises(errors.ResourceExhausted) as err:
        allocator.reserve("i-1", {"/dev/xvdba"})
    assert "i-1" in str(err.value)


def test_concurrent_reservations_never_collide() -> None:
    allocator = DeviceAllocator()
    start = threading.Barrier(20)

    def attach(_: int) -> str:
        start.wait()
        with allocator.instance_lock("i-1"):
            return allocator.reserve("i-1", {"/dev/sda1"})

    with ThreadPoolExecutor(20) as pool:
        names = list(pool.map(attach, range(20)))
    assert len(set(names)) == 20
    assert sorted(names) == sorted(DEVICE_NAMES[:20])
