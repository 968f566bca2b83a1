"""GPUs a ClusterQueue can still admit, counting what it may borrow from its cohort (pure).

Kueue admits a workload on a flavor when (a) the queue's usage stays within its nominal quota plus
its ``borrowingLimit`` (none set: unlimited) and (b) the cohort's total usage stays within the
cohort's total nominal quota.  So the GPUs a queue can still admit on a flavor are

    borrowable = min(cohort nominal - cohort usage,  own nominal + borrowingLimit - own usage)
    admittable = max(0, own nominal - own usage, borrowable)

``cohort nominal - cohort usage`` is the sum over the cohort's ClusterQueues of ``nominal - usage``
(the others' unused quota, less what another queue already borrows, plus our own unused part).  The
queue's own unused nominal quota always counts: if other queues have borrowed it, Kueue gives it
back when they finish (or preempts them with ``preemption.reclaimWithinCohort``), and a request the
queue is entitled to should wait first in line rather than not be made.  A queue without a cohort
has only its own headroom.  ``lendingLimit`` and hierarchical cohorts are not modelled (the snapshot
does not carry them): with lending limits set the borrowable part can be smaller than this.
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.core.snapshot import ClusterQueueState, frozen_map

__all__ = ["CohortTotals", "admittable_gpus", "cohort_totals"]

# (cohort, flavor) -> (sum of nominal quota, sum of usage) over the cohort's ClusterQueues
CohortTotals = Mapping[tuple[str, str], tuple[float, float]]


def cohort_totals(cluster_queues: Mapping[str, ClusterQueueState]) -> CohortTotals:
    """Per (cohort, flavor) nominal and used GPUs; build once per snapshot (O(queues x flavors))."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for cq in cluster_queues.values():
        if not cq.cohort:
            continue
        for f in set(cq.nominal_gpus) | set(cq.used_gpus):
            n, u = out.get((cq.cohort, f), (0.0, 0.0))
            out[(cq.cohort, f)] = (n + cq.nominal_gpus.get(f, 0.0), u + cq.used_gpus.get(f, 0.0))
    return frozen_map(out)


def admittable_gpus(cq: ClusterQueueState, flavor: str, totals: CohortTotals) -> tuple[float, float]:
    """(GPUs ``cq`` can still admit on ``flavor``, of which borrowed from the cohort).

    ``totals`` is ``cohort_totals`` of the snapshot's ClusterQueues (it must include ``cq``).
    """
    own = cq.nominal_gpus.get(flavor, 0.0) - cq.used_gpus.get(flavor, 0.0)
    if not cq.cohort:
        return max(0.0, own), 0.0
    nominal, used = totals.get((cq.cohort, flavor), (0.0, 0.0))
    borrowable = nominal - used
    limit = cq.borrowing_limit_gpus.get(flavor)
    if limit is not None:
        borrowable = min(borrowable, own + limit)
    total = max(0.0, own, borrowable)
    return total, max(0.0, total - max(0.0, own))
