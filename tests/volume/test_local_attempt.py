"""The volume activities as the workflows' local first attempt: no heartbeat, the worker's own
rate budget, a long wait handed over with its progress."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.volume as volume_activities
from activities.budget import LocalBudget
from activities.volume import VolumeActivities
from cloudloop.cloud.models import Volume
from cloudloop.messages.volume import HAND_OVER, CreateVolumeInput, ReadVolumesInput

COMMON = {"cluster": "c1", "provider": "aws"}


class CreatingForever:
    """A driver whose one volume never leaves ``creating``."""

    provider = "aws"

    def __init__(self) -> None:
        self.reads = 0

    def get_volume(self, volume_id: str) -> Volume:
        self.reads += 1
        return Volume(id=volume_id, size_gib=1, state="creating")

    def list_volumes(self, cluster: str) -> list[Volume]:
        return []


def volume_activities_of(
    driver: CreatingForever, local_budget: LocalBudget | None = None
) -> VolumeActivities:
    """The activities on ``driver``, a duck of every part they take."""
    part = cast(Any, driver)
    return VolumeActivities(
        part, part, part, part, provider=driver.provider, local_budget=local_budget
    )


def local_env() -> tuple[ActivityEnvironment, list[Any]]:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, is_local=True)
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    return env, beats


def test_a_long_wait_is_handed_over_with_its_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(volume_activities, "LOCAL_WAIT_S", 0.3)
    driver = CreatingForever()
    env, beats = local_env()
    made = CreateVolumeInput(name="pvc-1", size_gib=1, resume={"volume_id": "vol-1"}, **COMMON)
    with pytest.raises(ApplicationError) as raised:
        env.run(volume_activities_of(driver).create, made)
    assert raised.value.type == HAND_OVER and raised.value.non_retryable
    assert raised.value.details == ({"volume_id": "vol-1"},)  # resumed from the input
    assert driver.reads >= 2  # it did wait, then stopped
    assert beats == []  # a local activity sends no heartbeat


def test_a_spent_budget_hands_over_before_any_cloud_call() -> None:
    driver = CreatingForever()
    env, _ = local_env()
    activities = volume_activities_of(driver, local_budget=LocalBudget(1.0, burst=1))
    read = ReadVolumesInput(kind="volumes", **COMMON)
    assert env.run(activities.read, read).volumes == []
    with pytest.raises(ApplicationError) as raised:
        env.run(activities.read, read)
    assert raised.value.type == HAND_OVER
    # As an activity task (the server's rate limit counts it) the budget does not apply.
    assert ActivityEnvironment().run(activities.read, read).volumes == []


def test_the_budget_refills_at_its_rate() -> None:
    now = [100.0]
    bucket = LocalBudget(2.0, burst=2, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    now[0] += 0.5  # one token at 2 a second
    assert [bucket.take(), bucket.take()] == [True, False]
    assert all(LocalBudget(None).take() for _ in range(1000))  # unlimited
