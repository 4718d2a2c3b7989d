"""Fixtures of the termination handler's stack tests: the AWS side of moto (SQS, EC2, Auto
Scaling through the stack's lifecycle extension)."""

from __future__ import annotations

import pytest

from devstack.backends.aws import NthCloud
from devstack.local import LocalStack


@pytest.fixture
def aws(stack: LocalStack) -> NthCloud:
    return NthCloud.at(stack.moto_endpoint, stack.autoscaling_endpoint)
