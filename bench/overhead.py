"""The added latency beside every overhead ratio: ``<prefix>_overhead_ms_p50`` and ``_p95``.

A ratio hides how much time Temporal adds; these print it. The benchmarks' samples alternate
between the workflow path and the direct path, so sample ``i`` of one and sample ``i`` of the
other met the cloud (and the machine's load) in the same state: the added latency of a pair is
their difference, in milliseconds, and the figures are the 50th and 95th percentiles of those
differences (inclusive method; with fewer than two pairs, both are the one difference).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def overhead_ms(
    prefix: str, workflow: Sequence[float], direct: Sequence[float]
) -> dict[str, float]:
    """``<prefix>_overhead_ms_p50``/``_p95`` over the pairs of ``workflow`` and ``direct``
    (seconds, in sample order)."""
    added = [(w - d) * 1000.0 for w, d in zip(workflow, direct, strict=False)]
    if not added:
        return {}
    if len(added) == 1:
        p50 = p95 = added[0]
    else:
        p50 = statistics.median(added)
        p95 = statistics.quantiles(added, n=20, method="inclusive")[18]
    return {f"{prefix}_overhead_ms_p50": round(p50, 1), f"{prefix}_overhead_ms_p95": round(p95, 1)}
