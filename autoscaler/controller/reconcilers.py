"""Which deciders the controller runs: the GPU-capacity admission check, the worker-group scaler,
the stalled-workload detector, the right-sizing recommender and, in MultiKueue dispatcher mode only, the dispatcher.

Both act through one ``Writer`` (``ctx.writer``; by default a ``KubeWriter`` over the API client,
with one background Event sender); the simulator and the demo hand in their own, so all three run
these same reconcilers.  Each keeps its state between passes
in memory: the admission reconciler its reservation ledger and retry counts (rebuilt from the
cluster when it (re)gains leadership), the scaler each group's recommendation window, scale
events and idle timers (lost on restart: the scaler then starts with empty windows, so the first
scale-down waits a full idle window again — the safe direction).  The dispatcher (``fleet`` given:
``--multikueue-dispatcher``) keeps one reservation ledger per worker cluster, rebuilt from the
nominations it finds after a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.controller.admission import AdmissionReconciler
from autoscaler.controller.context import ControllerContext, Reconciler, writer_for
from autoscaler.controller.recommend import RecommendationReconciler
from autoscaler.controller.scaling import ScalingReconciler
from autoscaler.controller.stall import StallReconciler

if TYPE_CHECKING:
    from autoscaler.controller.dispatch import FleetSource


def build_reconcilers(ctx: ControllerContext, fleet: FleetSource | None = None) -> list[Reconciler]:
    writer = writer_for(ctx)
    out: list[Reconciler] = [AdmissionReconciler(ctx, writer), ScalingReconciler(ctx, writer),
                             StallReconciler(ctx, writer), RecommendationReconciler(ctx, writer)]
    if fleet is not None:
        from autoscaler.controller.dispatch import DispatchReconciler

        dispatcher = DispatchReconciler(ctx, fleet, writer)
        dispatcher.register()
        out.append(dispatcher)
    return out
