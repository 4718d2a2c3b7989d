"""Cloud-neutral rules of the node termination handler's queue processor: when a message whose
drain failed is given up on instead of left for redelivery. Parsing a cloud's messages is the
cloud's own: AWS's SQS/EventBridge bodies are read in :mod:`cloudloop.cloud.aws.termination_events`.
"""

from __future__ import annotations

#: Drain failures that a redelivery of the same message would meet again (pods that may not be
#: evicted, an eviction refused for good): the message is given up on at once.
PERMANENT_DRAIN_FAILURES = frozenset({"DrainRefused", "EvictionFailed"})


def give_up_reason(failure_type: str, receive_count: int, max_receive_count: int) -> str | None:
    """Why a message whose drain failed is deleted instead of left for redelivery, or ``None``.

    ``max_receive_count`` 0 leaves every failed message to the queue (its redrive policy)."""
    if failure_type in PERMANENT_DRAIN_FAILURES:
        return "permanent"
    if max_receive_count and receive_count >= max_receive_count:
        return "max-receives"
    return None
