"""A drain never polls the API server faster than once a second (kubectl drain's pace)."""

from __future__ import annotations

import pydantic
import pytest

from cloudloop.messages.termination import DrainOptions
from cloudloop.rules.termination import give_up_reason
from cloudloop.settings import NthSettings
from starters.termination import drain_options


def test_default_poll_is_a_second() -> None:
    assert NthSettings().drain_poll_interval_s >= 1.0
    assert DrainOptions().drain_poll_interval_s >= 1.0
    assert drain_options(NthSettings()).drain_poll_interval_s >= 1.0


def test_faster_polling_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError):
        NthSettings(drain_poll_interval_s=0.25)


@pytest.mark.parametrize(
    ("failure", "receives", "most", "expected"),
    [
        pytest.param("DrainRefused", 1, 5, "permanent", id="refused"),
        pytest.param("EvictionFailed", 1, 0, "permanent", id="failed-no-limit"),
        pytest.param("DrainTimeout", 1, 5, None, id="timeout-first"),
        pytest.param("DrainTimeout", 5, 5, "max-receives", id="timeout-fifth"),
        pytest.param("DrainTimeout", 50, 0, None, id="redrive-policy"),
    ],
)
def test_when_a_message_is_given_up(
    failure: str, receives: int, most: int, expected: str | None
) -> None:
    assert give_up_reason(failure, receives, most) == expected
