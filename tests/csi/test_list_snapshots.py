"""ListSnapshots as the CSI spec says, through the Controller with its reads faked.

Pages of ``max_entries`` with ``next_token`` until it is empty, every snapshot once; an invalid
``starting_token`` → ``ABORTED``; a negative ``max_entries`` → ``INVALID_ARGUMENT``; filters by
``source_volume_id``; ``snapshot_id`` reads that one snapshot (the cluster's or not, as a
pre-provisioned VolumeSnapshotContent's) and an unknown one is an empty answer, not an error;
snapshot metadata of csi-snapshotter's ``--extra-create-metadata`` becomes tags. The workflows
behind the reads are the stack tests' (csi-sanity, the Kubernetes snapshot test).
"""

from __future__ import annotations

from typing import Any, cast

import grpc
import pytest

from cloudloop.cloud.models import Snapshot
from cloudloop.csi.controller import Context, Controller, snapshot_tags, split_parameters
from cloudloop.csi.operations import VolumeOperations
from cloudloop.csi.spec import Features
from cloudloop.csi.v1 import csi_pb2
from cloudloop.messages.volume import Code, ReadVolumesResult

SNAPSHOTS = [
    Snapshot(
        id=f"snap-{i:08x}",
        source_volume_id=f"vol-{i % 2:08x}",
        size_gib=1,
        state="completed",
        created_at=1.0,
        name=f"snapshot-{i}",
    )
    for i in range(7)
]
FOREIGN = Snapshot(id="snap-0000ffff", source_volume_id="vol-0000ffff", size_gib=2, state="pending")


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class FakeContext:
    def time_remaining(self) -> float | None:
        return 30.0

    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        raise Aborted(code, message)


class FakeReads:
    """The reads the controller asks for: the cluster's snapshots and any one snapshot."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def read(self, kind: str, *, snapshot_id: str = "", **_: Any) -> ReadVolumesResult:
        self.calls.append((kind, snapshot_id))
        if kind == "snapshots":
            return ReadVolumesResult(snapshots=SNAPSHOTS)
        found = [s for s in [*SNAPSHOTS, FOREIGN] if s.id == snapshot_id]
        if not found:
            return ReadVolumesResult(code=Code.NOT_FOUND, message=f"no snapshot {snapshot_id!r}")
        return ReadVolumesResult(snapshots=found)


@pytest.fixture
def reads() -> FakeReads:
    return FakeReads()


@pytest.fixture
def controller(reads: FakeReads) -> Controller:
    features = Features(zonal=True, snapshots=True, capacity=False, max_volumes_per_node=25)
    return Controller(cast(VolumeOperations, reads), features)


async def list_snapshots(controller: Controller, **fields: Any) -> csi_pb2.ListSnapshotsResponse:
    request = csi_pb2.ListSnapshotsRequest(**fields)
    return await controller.ListSnapshots(request, cast(Context, FakeContext()))


def ids(response: csi_pb2.ListSnapshotsResponse) -> list[str]:
    return [e.snapshot.snapshot_id for e in response.entries]


async def test_pages_of_max_entries_cover_every_snapshot_once(controller: Controller) -> None:
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        response = await list_snapshots(controller, max_entries=3, starting_token=token)
        assert len(response.entries) <= 3
        seen += ids(response)
        pages += 1
        token = response.next_token
        if not token:
            break

    assert pages == 3
    assert seen == [s.id for s in SNAPSHOTS]


async def test_no_max_entries_returns_everything_without_a_token(controller: Controller) -> None:
    response = await list_snapshots(controller)

    assert ids(response) == [s.id for s in SNAPSHOTS]
    assert response.next_token == ""
    assert response.entries[0].snapshot.ready_to_use is True
    assert response.entries[0].snapshot.size_bytes == 1 << 30


@pytest.mark.parametrize("token", ["invalid-token", "-1", "99", "snap-00000001"])
async def test_an_invalid_starting_token_is_aborted(controller: Controller, token: str) -> None:
    with pytest.raises(Aborted) as refused:
        await list_snapshots(controller, starting_token=token, max_entries=2)

    assert refused.value.code == grpc.StatusCode.ABORTED


async def test_negative_max_entries_is_an_invalid_argument(
    controller: Controller, reads: FakeReads
) -> None:
    with pytest.raises(Aborted) as refused:
        await list_snapshots(controller, max_entries=-1)

    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert reads.calls == []


async def test_source_volume_filter_pages_too(controller: Controller) -> None:
    first = await list_snapshots(controller, source_volume_id="vol-00000001", max_entries=2)
    rest = await list_snapshots(
        controller, source_volume_id="vol-00000001", starting_token=first.next_token
    )

    assert ids(first) + ids(rest) == ["snap-00000001", "snap-00000003", "snap-00000005"]
    assert rest.next_token == ""


async def test_a_snapshot_id_reads_that_snapshot_even_one_the_cluster_did_not_take(
    controller: Controller, reads: FakeReads
) -> None:
    response = await list_snapshots(controller, snapshot_id=FOREIGN.id)

    assert ids(response) == [FOREIGN.id]
    assert response.entries[0].snapshot.ready_to_use is False
    assert reads.calls == [("snapshot", FOREIGN.id)]


@pytest.mark.parametrize("snapshot_id", ["snap-0000dead", "not-a-snapshot-id"])
async def test_an_unknown_snapshot_id_is_an_empty_answer(
    controller: Controller, snapshot_id: str
) -> None:
    response = await list_snapshots(controller, snapshot_id=snapshot_id)

    assert ids(response) == [] and response.next_token == ""


async def test_a_snapshot_id_with_another_source_volume_is_an_empty_answer(
    controller: Controller,
) -> None:
    response = await list_snapshots(
        controller, snapshot_id="snap-00000001", source_volume_id="vol-00000000"
    )

    assert ids(response) == []


async def test_without_snapshots_list_snapshots_is_unimplemented(reads: FakeReads) -> None:
    features = Features(zonal=False, snapshots=False, capacity=False, max_volumes_per_node=10)
    controller = Controller(cast(VolumeOperations, reads), features)

    with pytest.raises(Aborted) as refused:
        await list_snapshots(controller)

    assert refused.value.code == grpc.StatusCode.UNIMPLEMENTED


def test_the_snapshotters_metadata_becomes_the_snapshots_tags() -> None:
    _, tags, _ = split_parameters(
        {
            "csi.storage.k8s.io/volumesnapshot/name": "backup",
            "csi.storage.k8s.io/volumesnapshot/namespace": "shop",
            "csi.storage.k8s.io/volumesnapshotcontent/name": "snapcontent-1",
        }
    )

    assert tags == {
        "kubernetes.io/created-for/volumesnapshot/name": "backup",
        "kubernetes.io/created-for/volumesnapshot/namespace": "shop",
        "kubernetes.io/created-for/volumesnapshotcontent/name": "snapcontent-1",
    }


def test_snapshot_class_tag_specifications_become_tags() -> None:
    tags = snapshot_tags(
        {
            "tagSpecification_1": "team=storage",
            "tagSpecification_2": " backup = nightly ",
            "tagSpecification_3": "empty=",
            "csi.storage.k8s.io/volumesnapshot/name": "backup",
        }
    )

    assert tags == {
        "team": "storage",
        "backup": "nightly",
        "empty": "",
        "kubernetes.io/created-for/volumesnapshot/name": "backup",
    }


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"type": "gp3"}, "unknown snapshot parameter 'type'; valid: tagSpecification_<n>"),
        ({"tagSpecification_x": "a=b"}, "unknown snapshot parameter 'tagSpecification_x'"),
        ({"tagSpecification_1": "no-equals"}, "is not 'key=value'"),
        ({"tagSpecification_1": "=value"}, "is not 'key=value'"),
    ],
)
async def test_a_bad_snapshot_parameter_is_refused_before_any_workflow(
    controller: Controller, reads: FakeReads, parameters: dict[str, str], message: str
) -> None:
    request = csi_pb2.CreateSnapshotRequest(
        name="snapshot-1", source_volume_id="vol-00000001", parameters=parameters
    )

    with pytest.raises(Aborted) as refused:
        await controller.CreateSnapshot(request, cast(Context, FakeContext()))

    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(refused.value)
    assert reads.calls == []
